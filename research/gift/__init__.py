"""research/gift/README.md: the gift study."""
