"""research/README.md: the torchrun_exit study."""
