"""eBPF probe programs and their loaders (collection layer; never imports textual)."""
