"""Benchmarks: each figure next to a baseline measured in the same run on the same servers, so that
the ratios hold on a noisy machine. Run ``python -m bench NAME`` from a checkout (the benchmarks are
not in the wheel)."""
