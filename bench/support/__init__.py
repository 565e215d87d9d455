"""What the benchmarks share: writing a run's figures (``report``), a ``fanout serve`` for a run
(``server``), load from ``wrk``, processes' CPU time, and followers built through the graph
path."""
