"""Account: turn ring records into figures (CPU categories, estimates, operations, GPU)."""
