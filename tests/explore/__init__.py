"""A deterministic interleaving explorer for the graph layer (see explorer.py)."""
