"""research/README.md: the train_compare study."""
