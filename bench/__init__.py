"""Benchmarks: each figure next to a baseline measured in the same run on the same servers, so that
the ratios hold on a noisy machine. Run ``python -m bench NAME`` from a checkout (the benchmarks are
not in the wheel).

One subpackage per thing measured (``fanout``, ``graph``, ``reads``, ``cache``, ``capacity``,
``brokers``), the helpers they share in ``support``; ``__main__`` maps each NAME to its module,
and ``on_brokers`` runs them on both brokers. Results are written to ``bench/results``."""
