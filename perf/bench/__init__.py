"""Benchmarks a user runs: perf/bench/README.md."""
