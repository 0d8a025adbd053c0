"""Textual app (display layer; never imports bcc)."""
