"""research/README.md: the gift study."""
