"""Benchmarks (perf.bench), cost-model reports (perf.model) and their shared code (perf.common); run them from the repository root as modules, e.g. ``python -m perf.bench.codec_throughput``."""
