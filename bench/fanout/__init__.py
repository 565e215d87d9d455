"""Delivering posts: a post's fan-out end to end and its appends alone, deleting a post, and the
per-member passes of the native core against the Python reference."""
