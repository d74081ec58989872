"""Scripts launched by the tests under torchrun (tests/pytorch)."""
