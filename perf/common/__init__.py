"""Code the benchmarks and the research studies share: perf/common/README.md."""
