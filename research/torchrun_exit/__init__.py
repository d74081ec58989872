"""research/torchrun_exit/README.md: the torchrun_exit study."""
