"""The garbage-collector policy of a consumer process.

A consumer allocates tens of objects per event (decoded events, edge changes, list references,
reply tuples) and none of them form reference cycles, yet CPython's default policy runs a young
collection every 700 allocations and re-scans everything imported at startup (pydantic's schemas,
librdkafka's bindings) in its older generations. Measured on the graph consumer applying 50k
events, the two policies in alternation, three runs each: ~25% less CPU per event with this one.
"""

from __future__ import annotations

import gc

# Young collections every 50k allocations instead of 700: at most a few MB of cyclic garbage
# waits a little longer; the older generations keep CPython's ratios of 10 closer to the young.
YOUNG_THRESHOLD = 50_000


def tune_for_consuming() -> None:
    """Call once the process is wired: what exists by then lives as long as the process, so it
    is moved out of the collector's sight (``gc.freeze``) instead of being traversed again."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
