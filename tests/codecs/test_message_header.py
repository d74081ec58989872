"""The 16-byte header in front of every collective message: framed encode/decode from
untrusted bytes, every field checked with a typed error that names it, and the receive-side
check inside a collective."""
import numpy as np
import pytest

import ccompress as cc
from ccompress import _core

H = _core.MESSAGE_HEADER_BYTES
SPECS = ["none", "bf16", "fp8_e4m3:g128", "taco:g128", "hint8:g32", "nvfp4", "hint4"]


def test_header_layout_is_little_endian_and_16_bytes():
    c = _core.Codec.parse("fp8_e4m3:g64")
    raw = _core.message_header(c, "bfloat16", 1000, 7)
    assert H == 16 and len(raw) == 16
    assert raw[:2] == bytes([0x43, 0x4D]) and raw[2] == 1 and raw[3] == 1  # magic, v1, bf16
    assert int.from_bytes(raw[4:8], "little") == c.id
    assert int.from_bytes(raw[8:12], "little") == 1000
    assert int.from_bytes(raw[12:16], "little") == 7
    assert _core.parse_message_header(raw) == {"magic": 0x4D43, "version": 1, "dtype": 1,
                                               "codec_id": c.id, "count": 1000, "call": 7}


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_framed_round_trip_equals_decode(rng, spec, dtype):
    from ccompress._internal.arrays import numpy_dtype

    x = rng.standard_normal(3001).astype(numpy_dtype(dtype))
    codec = cc.Codec.parse(spec)
    msg = codec.encode_message(x, call=5)
    assert msg.size == H + codec.wire_bytes(x.size, dtype)
    want = codec.decode(codec.encode(x), x.size, dtype)
    for n in (None, x.size):
        got = codec.decode_message(msg, n, dtype, call=5)
        assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))


# (byte offset, new byte, field named in the error)
CORRUPTIONS = [(0, 0x00, "magic"), (2, 9, "version"), (3, 2, "dtype"), (5, 0x55, "codec id"),
               (8, 3, "count"), (12, 6, "call")]


@pytest.mark.parametrize("offset,value,field", CORRUPTIONS)
def test_each_corrupted_field_is_named(offset, value, field):
    codec = cc.Codec.parse("fp8_e4m3:g128")
    msg = codec.encode_message(np.ones(300, np.float32), call=5)
    msg[offset] = value
    with pytest.raises(cc.MessageError, match=f"header {field}"):
        codec.decode_message(msg, 300, call=5)


def test_other_codec_wrong_length_and_short_buffer():
    x = np.ones(300, np.float32)
    msg = cc.Codec.parse("fp8_e4m3:g128").encode_message(x)
    with pytest.raises(cc.MessageError, match="codec id"):
        cc.Codec.parse("fp8_e4m3:g64").decode_message(msg)
    with pytest.raises(cc.MessageError, match="payload bytes"):
        cc.Codec.parse("fp8_e4m3:g128").decode_message(msg[:-1])
    with pytest.raises(cc.MessageError, match="shorter than"):
        cc.Codec.parse("fp8_e4m3:g128").decode_message(msg[:7])
    with pytest.raises(cc.MessageError, match="count"):
        cc.Codec.parse("fp8_e4m3:g128").decode_message(msg, 299)


def test_header_bytes_are_counted_in_stats():
    """payload_bytes is the sum of codec.wire_bytes over the messages; header_bytes adds the
    call check (one per peer) and 16 bytes per message."""
    codec = cc.Codec.parse("fp8_e4m3:g128")
    n, P, slice_elems = 10_000, 4, 1024

    def body(c):
        c.allreduce(np.ones(n, np.float32), codec=codec, algo="one_shot")
        return c.last_stats, c.bytes_sent

    stats, sent = cc.run_inproc(P, body, slice_elems=slice_elems)[0]
    slices = [min(slice_elems, n - b) for b in range(0, n, slice_elems)]
    messages = len(slices) * (P - 1)  # one_shot: every slice to every peer
    assert stats["payload_bytes"] == sum(codec.wire_bytes(s) for s in slices) * (P - 1)
    call_check = stats["header_bytes"] - messages * H
    assert call_check > 0 and call_check % (P - 1) == 0
    assert sent == stats["payload_bytes"] + stats["header_bytes"]


@pytest.mark.parametrize("algo", ["two_shot", "one_shot", "ring"])
def test_message_of_another_call_is_refused(algo):
    """A rank whose call count differs (here forced by a test hook) passes the call check,
    but its peers refuse its payload messages by the header's call field: MessageError naming
    the peer and the field, never a result computed from the wrong call. A rank that stopped
    on the error sends nothing more, so a peer still waiting for it times out instead. Every
    communicator is unusable afterwards."""

    def body(c):
        if c.rank == 1:
            c._t._skip_calls(1)
        with pytest.raises((cc.MessageError, cc.CollectiveTimeout)) as e:
            c.allreduce(np.ones(5000, np.float32), codec="bf16", algo=algo)
        assert not c.usable
        with pytest.raises(cc.CCompressError, match="unusable"):
            c.allreduce(np.ones(10, np.float32))
        return e.value

    errors = cc.run_inproc(3, body, timeout=2)
    refused = [e for e in errors if isinstance(e, cc.MessageError)]
    assert refused, errors
    for e in refused:
        assert "header call" in str(e) and "from rank" in str(e), str(e)
