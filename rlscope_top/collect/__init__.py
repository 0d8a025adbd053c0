"""Collect: attach to the target, run the probes and sources, write records to the ring."""
