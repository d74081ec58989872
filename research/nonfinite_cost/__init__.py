"""research/README.md: the nonfinite_cost study."""
