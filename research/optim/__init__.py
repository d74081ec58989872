"""research/README.md: the optim study."""
