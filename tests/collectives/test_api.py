"""The Python surface: Codec, build_info, DLPack arrays from PyTorch (bf16 included)."""
import numpy as np
import pytest

import ccompress as cc
from helpers.common import gaussian_parts, same_bits

try:
    import torch
except ImportError:  # PyTorch is optional
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


def test_codec_api(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    c = cc.Codec.parse("fp8_e4m3:g128")
    assert c.name == "fp8_e4m3:g128" and c.group == 128 and c.lossy("float32")
    buf = c.encode(x)
    assert buf.dtype == np.uint8 and buf.size == c.wire_bytes(1000) == 1000 + 4 * 8
    y = c.decode(buf, 1000)
    np.testing.assert_array_equal(y, c.roundtrip(x))
    assert np.linalg.norm(y - x) / np.linalg.norm(x) < 0.04
    none = cc.Codec.parse("none")
    assert not none.lossy("float32")
    assert none.wire_bytes(10, "bfloat16") == 20 and none.wire_bytes(10) == 40
    np.testing.assert_array_equal(none.roundtrip(x), x)
    assert cc.Codec.parse(c) is c and cc.Codec.parse("fp8_e4m3") == c
    z = c.roundtrip(x.reshape(10, 100))
    assert z.shape == (10, 100)


def test_build_info():
    info = cc.build_info()
    assert info["version"] == cc.__version__
    assert info["cpu_backend"] and info["transports"]["inproc"]
    for key in ("mpi", "cuda", "nccl"):
        assert "available" in info[key]
        if not info[key]["available"]:
            assert info[key]["reason"]


def test_chunk_range_covers_everything():
    for n in (0, 1, 5, 17, 1000):
        for parts in (1, 2, 3, 8):
            ranges = [cc.chunk_range(n, parts, i) for i in range(parts)]
            assert ranges[0][0] == 0 and ranges[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
            sizes = [b - a for a, b in ranges]
            assert max(sizes) - min(sizes) <= 1


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_torch_tensors(rng, dtype):
    tdt = getattr(torch, dtype)
    parts = gaussian_parts(rng, 4, 3001)
    tensors = [torch.from_numpy(p).to(tdt) for p in parts]
    res = cc.simulate.allreduce(tensors, codec="fp8_e4m3:g128", algo="two_shot")
    assert all(isinstance(r, torch.Tensor) and r.dtype == tdt for r in res)
    as_f32 = [r.float().numpy() for r in res]
    assert same_bits(as_f32)
    ref = torch.stack(tensors).double().sum(0).numpy()
    assert np.linalg.norm(as_f32[0] - ref) / np.linalg.norm(ref) < 4.5e-2
    if dtype != "float32":
        # The same values as NumPy arrays of the same dtype give the same bits.
        from ccompress._internal.arrays import numpy_dtype
        npy = [t.float().numpy().astype(numpy_dtype(dtype)) for t in tensors]
        res_np = cc.simulate.allreduce(npy, codec="fp8_e4m3:g128", algo="two_shot")
        np.testing.assert_array_equal(res_np[0].astype(np.float32), as_f32[0])


@needs_torch
def test_torch_in_place_and_errors():
    comm = cc.Communicator.inproc(1)[0]
    x = torch.arange(10, dtype=torch.float32)
    y = comm.allreduce(x, out=x)
    assert y is x
    with pytest.raises(cc.InvalidArgument, match="not contiguous"):
        comm.allreduce(torch.zeros(8, 8)[:, ::2])
    with pytest.raises(cc.InvalidArgument, match="cast first"):
        comm.allreduce(torch.zeros(8, dtype=torch.float64))
    with pytest.raises(cc.InvalidArgument, match="DLPack"):
        comm.allreduce(torch.zeros(8, requires_grad=True))


def test_nccl_discovery_reports_why(tmp_path, monkeypatch):
    from ccompress._internal.nccl import find_nccl

    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libnccl.so.2").write_bytes(b"not a library")
    monkeypatch.setenv("NCCL_ROOT", str(tmp_path))
    found = find_nccl()
    if found["path"] is None:
        assert str(tmp_path) in found["reason"]
    else:  # a real libnccl elsewhere (the wheel or the system) was found after ours failed
        assert not found["path"].startswith(str(tmp_path)) and found["version"].startswith("2.")
