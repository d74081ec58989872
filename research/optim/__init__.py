"""research/optim/README.md: the optim study."""
