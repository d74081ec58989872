"""research/tsr_step_cost/README.md: the tsr_step_cost study."""
