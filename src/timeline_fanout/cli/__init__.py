"""Wiring and the ``fanout`` CLI: settings, the local stack, and the commands."""
