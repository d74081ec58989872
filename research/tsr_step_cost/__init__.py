"""research/README.md: the tsr_step_cost study."""
