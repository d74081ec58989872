"""research/nonfinite_cost/README.md: the nonfinite_cost study."""
