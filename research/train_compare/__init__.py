"""research/train_compare/README.md: the train_compare study."""
