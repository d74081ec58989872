"""Cost-model reports and projections: perf/model/README.md."""
