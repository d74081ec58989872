"""Makes the ccompress world group and nothing else: launched with a bad configuration by
tests/pytorch/test_torch_integration.py::test_configuration_error_is_one_line_per_rank, which
reads what torchrun prints when init_process_group raises, uncaught, on every rank."""
import torch.distributed as dist

import ccompress.torch  # noqa: F401 - registers the backend

dist.init_process_group("ccompress")
print(f"UNEXPECTED: the group was made on rank {dist.get_rank()}", flush=True)
dist.destroy_process_group()
