"""Scripts launched by the tests under torchrun (tests/pytorch), and virtual_ranks.py: the
backend on threads of one process (tests/pytorch and tests/cuda import it)."""
