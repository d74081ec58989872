"""All-to-all (Communicator.all_to_all) over in-process ranks, the ordered (NCCL-style)
executor on the CPU and TCP: equal and uneven splits in rows of dim 0, every codec family,
each piece received bit for bit as its sender's encode + decode of that piece alone and
within the codec's bound against fp64 (tests/helpers/alltoall_checks.py); bad splits, codecs
that differ and error feedback refused on every rank, the group still usable after."""
import numpy as np
import pytest

import ccompress as cc
from ccompress import _core
from ccompress.communicator import on_threads
from helpers.alltoall_checks import CODECS, check_received, inputs, piece, split_table
from helpers.common import run_on_threads


def run(comms, fn):
    return run_on_threads(comms, lambda c, r: fn(c))


def exchange(comms, xs, table, codec, **kw):
    """Every rank's all_to_all of its input with the splits of ``table``."""
    def body(c):
        r = c.rank
        return c.all_to_all(xs[r], codec=codec, in_splits=list(table[r]),
                            out_splits=list(table[:, r]), **kw)
    return run(comms, body)


@pytest.mark.parametrize("codec", CODECS)
def test_uneven_splits_every_codec_bit_for_bit_the_senders_encoding(rng, codec):
    """Three ranks, pieces of 0 to 300 elements cut into slices of 64 (several slices per
    piece: the slices never change a piece's bits), each piece at its own scale."""
    table = split_table(rng, 3, 300)
    xs = inputs(7, table)
    ys = exchange(cc.Communicator.inproc(3, slice_elems=64), xs, table, codec)
    for r, y in enumerate(ys):
        check_received(y, xs, table, codec, r)


@pytest.mark.parametrize("nranks", [1, 2, 4, 5])
def test_equal_splits_rows_of_dim0_and_16_bit_inputs(rng, nranks):
    """No splits: x.shape[0] / size rows to each rank; the result has x's shape."""
    table = np.full((nranks, nranks), 3)
    for dtype, codec in (("float32", "fp8_e4m3:g32"), ("bfloat16", "nvfp4"),
                         ("float16", "hint8:g32")):
        xs = inputs(nranks, table, row_shape=(5, 4), dtype=dtype)
        ys = run(cc.Communicator.inproc(nranks), lambda c: c.all_to_all(xs[c.rank], codec=codec))
        for r, y in enumerate(ys):
            assert y.shape == xs[r].shape and y.dtype == xs[r].dtype
            check_received(y, xs, table, codec, r)


def test_own_piece_is_encoded_like_a_peers(rng):
    """The piece a rank sends to itself goes through the codec too: the same bits as its
    encode + decode, not its input."""
    table = np.array([[40, 40], [40, 40]])
    xs = inputs(3, table)
    ys = exchange(cc.Communicator.inproc(2), xs, table, "fp8_e4m3:g32")
    own = ys[0][:40]
    assert not np.array_equal(own, piece(xs[0], table, 0, 0))
    np.testing.assert_array_equal(own, cc.Codec.parse("fp8_e4m3:g32").roundtrip(xs[0][:40]))


def test_wire_bytes_are_the_pieces_encodings(rng):
    """payload_bytes: the encodings of the pieces sent to peers (the own piece never leaves)."""
    table = np.array([[5, 300, 0], [7, 1, 2], [100, 0, 64]])
    xs = inputs(1, table)
    comms = cc.Communicator.inproc(3)
    exchange(comms, xs, table, "nvfp4")
    c = cc.Codec.parse("nvfp4")
    for r, comm in enumerate(comms):
        want = sum(c.wire_bytes(int(table[r][j])) for j in range(3) if j != r and table[r][j])
        assert comm.last_stats["payload_bytes"] == want
        assert comm.last_stats["quantizations"] == 1


def test_out_async_and_stochastic_rounding(rng):
    """out= receives the result; async_op returns a Work; an :sr codec stays in its bound."""
    table = np.array([[10, 20], [30, 40]])
    xs = inputs(2, table, row_shape=(3,))
    outs = [np.empty((40, 3), np.float32), np.empty((60, 3), np.float32)]

    def body(c):
        r = c.rank
        w = c.all_to_all(xs[r], outs[r], codec="fp8_e4m3:g32:sr", in_splits=table[r],
                         out_splits=table[:, r], async_op=True)
        return w.wait()

    ys = run(cc.Communicator.inproc(2), body)
    for r, y in enumerate(ys):
        assert y is outs[r]
        check_received(y, xs, table, "fp8_e4m3:g32:sr", r, bits=False)


def test_out_without_out_splits_is_cut_into_equal_pieces():
    """As torch's all_to_all_single: uneven in_splits, no out_splits, out's rows cut into
    equal pieces (rank 0 takes 1 row from each rank into 2 rows, rank 1 3 rows into 6)."""
    def body(c):
        x = np.arange(8, dtype=np.float32).reshape(4, 2) + 10 * c.rank
        out = np.zeros((2 if c.rank == 0 else 6, 2), np.float32)
        return c.all_to_all(x, out, in_splits=[1, 3])

    ys = run(cc.Communicator.inproc(2), body)
    x = [np.arange(8, dtype=np.float32).reshape(4, 2) + 10 * r for r in range(2)]
    np.testing.assert_array_equal(ys[0], np.concatenate([x[0][:1], x[1][:1]]))
    np.testing.assert_array_equal(ys[1], np.concatenate([x[0][1:], x[1][1:]]))


def test_ordered_executor_and_tcp_give_the_same_bits(rng):
    """The ordered executor (NCCL's) on the CPU and TCP sockets: the same bits as in-process."""
    table = split_table(rng, 4, 200)
    xs = inputs(11, table)
    group = _core.InprocGroup(4)
    ordered = [cc.Communicator(group.transport(r, ordered=True), _keepalive=group,
                               slice_elems=64) for r in range(4)]
    ts = [_core.TcpTransport(r, 4, "127.0.0.1") for r in range(4)]
    on_threads(ts, lambda t, r: t.connect([u.address for u in ts], 30.0))
    tcp = [cc.Communicator(t, timeout=30, slice_elems=32) for t in ts]
    for comms in (ordered, tcp):
        ys = exchange(comms, xs, table, "hint4")
        for r, y in enumerate(ys):
            check_received(y, xs, table, "hint4", r)
    for c in tcp:
        c.close()


def outcomes(comms, fn):
    """Each rank's exception type (or 'ok') from fn(comm), then a good call on every rank."""
    def body(c):
        try:
            fn(c)
            got = "ok"
        except cc.CCompressError as e:
            got = (type(e).__name__, str(e))
        y = c.all_to_all(np.arange(4 * c.size, dtype=np.float32), codec="none")
        assert np.array_equal(y.reshape(c.size, 4), np.tile(np.arange(4 * c.rank, 4 * c.rank + 4),
                                                            (c.size, 1))), "not usable after"
        return got
    return run(comms, body)


def test_splits_that_do_not_add_up_raise_on_every_rank():
    comms = cc.Communicator.inproc(3, timeout=20)
    got = outcomes(comms, lambda c: c.all_to_all(
        np.zeros(6, np.float32), in_splits=[2, 2, 3 if c.rank == 1 else 2]))
    assert got[1][0] == "InvalidArgument" and "add up to 7 rows" in got[1][1]
    assert got[0][0] == got[2][0] == "MismatchError"
    got = outcomes(comms, lambda c: c.all_to_all(np.zeros(7, np.float32)))
    assert all(g[0] == "InvalidArgument" and "equal pieces" in g[1] for g in got)
    got = outcomes(comms, lambda c: c.all_to_all(np.zeros(6, np.float32), in_splits=[3, 3]))
    assert all(g[0] == "InvalidArgument" and "3 non-negative" in g[1] for g in got)


def test_splits_that_sender_and_receiver_disagree_on_raise_on_every_rank():
    """Rank 0 sends 3 rows to rank 2, which expects 2: MismatchError naming both, everywhere."""
    comms = cc.Communicator.inproc(3, timeout=20)

    def call(c):
        ins = [[2, 2, 3], [2, 2, 2], [2, 2, 2]][c.rank]
        return c.all_to_all(np.zeros(sum(ins), np.float32), in_splits=ins,
                            out_splits=[2, 2, 2])
    got = outcomes(comms, call)
    for g in got:
        assert g[0] == "MismatchError" and "rank 0 sends 3 elements to rank 2" in g[1], g


def test_swapped_splits_whose_sums_all_hold_raise_on_every_rank():
    """Rank 0 sends 3 rows to rank 1 and 2 to rank 2, which expect 2 and 3: every buffer adds
    up, so only the split table's checksum in the call check sees it; every rank then learns
    the full table and raises MismatchError naming the first disagreeing pair."""
    comms = cc.Communicator.inproc(3, timeout=20)

    def call(c):
        ins = [[2, 3, 2], [2, 2, 2], [2, 2, 2]][c.rank]
        outs = [[2, 2, 2], [2, 2, 2], [3, 2, 2]][c.rank]
        return c.all_to_all(np.zeros(sum(ins), np.float32), np.zeros(sum(outs), np.float32),
                            in_splits=ins, out_splits=outs)
    got = outcomes(comms, call)
    for g in got:
        assert g[0] == "MismatchError" and "rank 0 sends 3 elements to rank 1" in g[1], g


def test_splits_travel_in_the_call_check_one_round_before_the_data():
    """The call check of an all-to-all is the size of any collective's (the split table rides
    in it, no second round where the splits agree): header_bytes is one call-check header to
    each peer plus 16 bytes per message, as for an all-gather, and all the bytes sent."""
    table = np.array([[5, 300, 0, 7], [7, 1, 2, 9], [100, 0, 64, 1], [3, 3, 3, 3]])
    xs = inputs(5, table)
    comms = cc.Communicator.inproc(4, slice_elems=128)  # (the codec's alignment)
    exchange(comms, xs, table, "fp8_e4m3:g128")
    a2a = [c.last_stats["header_bytes"] for c in comms]
    for c in comms:  # every byte the transport sent is counted
        assert c.bytes_sent == c.last_stats["header_bytes"] + c.last_stats["payload_bytes"]
    run(comms, lambda c: c.allgather(np.zeros(1, np.float32)))
    check = comms[0].last_stats["header_bytes"] - 3 * 16  # one message to each peer
    assert check > 0 and check % 3 == 0
    for r, got in enumerate(a2a):
        messages = sum(-(-int(table[r][j]) // 128) for j in range(4) if j != r)
        assert got == check + 16 * messages, (r, got, check, messages)


def test_core_checks_the_split_table_on_every_rank():
    """Through the binding (the core's own check, not Python's): a rank whose splits do not
    add up to its buffer makes every rank raise InvalidArgument naming it."""
    group = _core.InprocGroup(2)
    ts = [group.transport(r) for r in range(2)]
    spec = _core.CallSpec("alltoall", timeout=20.0)
    x, y = np.zeros(4, np.float32), np.zeros(4, np.float32)

    def body(t, r):
        try:
            t.run(spec, x.ctypes.data, y.ctypes.data, 4, "float32", cc.Codec.parse("none")._c,
                  in_splits=[2, 3 if r else 2], out_splits=[2, 2])
        except cc.InvalidArgument as e:
            return str(e)
    got = on_threads(ts, body)
    assert all("rank 1's in_splits add up to 5 elements, but its input holds 4" in g
               for g in got), got


def test_codec_that_differs_between_ranks_raises_on_every_rank():
    comms = cc.Communicator.inproc(2, timeout=20)
    got = outcomes(comms, lambda c: c.all_to_all(
        np.zeros(4, np.float32), codec="fp8_e4m3:g32" if c.rank else "nvfp4"))
    for g in got:
        assert g[0] == "MismatchError" and "alltoall(dtype=float32, codec=nvfp4" in g[1], g


def test_error_feedback_is_refused_on_every_rank():
    comms = cc.Communicator.inproc(2, timeout=20)
    ef = cc.ErrorFeedback()
    got = outcomes(comms, lambda c: c.all_to_all(np.zeros(4, np.float32), codec="fp8_e4m3:g32",
                                                 error_feedback=ef if c.rank == 0 else None))
    assert got[0][0] == "Unsupported" and "no error feedback" in got[0][1]
    assert got[1][0] == "MismatchError"


def test_nonfinite_raise_counts_every_rank():
    """A NaN in one piece: the rank that receives it holds it, and every rank raises."""
    comms = cc.Communicator.inproc(2, timeout=20)

    def body(c):
        x = np.ones(4, np.float32)
        if c.rank == 0:
            x[3] = np.nan  # goes to rank 1
        try:
            c.all_to_all(x, codec="fp8_e4m3:g32", nonfinite="raise")
        except cc.NonFiniteError as e:
            return str(e)
    got = run(comms, body)
    assert "1 here" in got[1] and "none in this rank's output" in got[0], got


def test_algo_op_and_splits_apply_where_they_mean_something():
    """alltoall has one schedule and reduces nothing; splits belong to alltoall only."""
    with pytest.raises(cc.InvalidArgument, match="algo does not apply"):
        _core.CallSpec("alltoall", algo="ring")
    with pytest.raises(cc.InvalidArgument, match="op does not apply"):
        _core.CallSpec("alltoall", op="sum")
    t = _core.InprocGroup(1).transport(0)
    x = np.zeros(2, np.float32)
    with pytest.raises(cc.InvalidArgument, match="apply to alltoall only"):
        t.run(_core.CallSpec("allgather"), x.ctypes.data, x.ctypes.data, 2, "float32",
              cc.Codec.parse("none")._c, in_splits=[2])
