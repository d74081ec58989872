"""One-off studies (research/README.md); run from the repository root as modules."""
