"""timeline-fanout: keeps a social follower graph and delivers posts into follower timelines.

The layers, each importing only those below it (checked by ``lint-imports``): `schemas`
(events, ids, topics) and `memcache` (the pipelined memcached client) at the bottom; `graph`
(the edge store, the cached lists, the timelines) on them; `producers`, `consumers` and `api`
on those; `cli` wires everything together and nothing imports it.
"""
