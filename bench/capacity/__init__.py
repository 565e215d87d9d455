"""Capacity: sizes measured on the real formats and the load run, and the model of what 1M, 100M
and 1B users need."""
