"""All-to-all on the device path: N virtual ranks of one GPU (Communicator.cuda_loopback),
the codec's CUDA encode and decode kernels per piece and the ordered executor. Uneven splits
with empty pieces, every codec family: each rank's output bit for bit its senders' encode +
decode of each piece on the CPU backend, within the codec's bound against fp64. Runs on a GPU
or on the CPU emulator of cuda/emu (scripts/sanitize.sh); the NCCL send/recv path is in
test_nccl_emulated.py."""
import numpy as np
import pytest

import ccompress as cc
from helpers.alltoall_checks import CODECS, check_received, inputs, split_table
from helpers.cuda_helpers import DeviceArray, cuda_or_reason

CUDA, WHY = cuda_or_reason()
pytestmark = pytest.mark.skipif(CUDA is None, reason=str(WHY))


@pytest.mark.parametrize("codec", CODECS)
def test_loopback_uneven_splits_match_the_senders_encoding(codec):
    table = split_table(np.random.default_rng(3), 3, 300)
    xs = inputs(9, table, row_shape=(2,))

    def body(c):
        r = c.rank
        y = c.all_to_all(DeviceArray.of(xs[r]), codec=codec, in_splits=table[r],
                         out_splits=table[:, r])
        return y.numpy()

    ys = cc.run_cuda_loopback(3, body, slice_elems=128)
    for r, y in enumerate(ys):
        check_received(y, xs, table, codec, r)


def test_loopback_async_bfloat16_into_out():
    import ml_dtypes  # noqa: F401 - numpy's bfloat16

    table = np.array([[64, 0], [5, 200]])
    xs = inputs(4, table, dtype="bfloat16")

    def body(c):
        r = c.rank
        out = DeviceArray((int(table[:, r].sum()),), xs[r].dtype)
        w = c.all_to_all(DeviceArray.of(xs[r]), out, codec="mxfp8", in_splits=table[r],
                         out_splits=table[:, r], async_op=True)
        assert w.wait() is out
        return out.numpy()

    for r, y in enumerate(cc.run_cuda_loopback(2, body)):
        check_received(y, xs, table, "mxfp8", r)
