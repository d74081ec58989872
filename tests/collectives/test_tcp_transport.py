"""_core.TcpTransport, the transport of the torch backend under torchrun: ranks as threads of
this process, each with its own sockets on loopback. The same bits as ccompress.simulate for
every algo and collective, messages that arrive before their receive (small slices, many in
flight), a receive of the wrong size a MessageError, a peer that closes its connections an
error on the others instead of a hang, and a silent peer a CollectiveTimeout."""
import threading
import time

import numpy as np
import pytest

import ccompress as cc
from ccompress import _core
from ccompress.communicator import on_threads
from helpers.common import gaussian_parts


def transports(size, timeout=30.0):
    ts = [_core.TcpTransport(r, size, "127.0.0.1") for r in range(size)]
    addresses = [t.address for t in ts]
    on_threads(ts, lambda t, r: t.connect(addresses, timeout))
    return ts


def make(size, timeout=30.0, slice_elems=2048):
    # Small slices: many messages in flight at once, some ahead of their receives.
    return [cc.Communicator(t, timeout=timeout, slice_elems=slice_elems)
            for t in transports(size, timeout)]


@pytest.mark.parametrize("algo", ["ring", "two_shot", "tree", "one_shot"])
def test_same_bits_as_simulate(rng, algo):
    parts = gaussian_parts(rng, 3, 100_003)
    comms = make(3)
    outs = on_threads(comms, lambda c, r: c.allreduce(parts[r], codec="fp8_e4m3:g128",
                                                      algo=algo))
    sim = cc.simulate.allreduce(list(parts), codec="fp8_e4m3:g128", algo=algo)
    for r in range(3):
        assert outs[r].tobytes() == sim[r].tobytes(), r
    assert all(c.transport == "tcp" and c.bytes_sent > 0 for c in comms)
    on_threads(comms, lambda c, r: c.barrier())
    on_threads(comms, lambda c, r: c.close())


def test_reduce_scatter_and_allgather_match_simulate(rng):
    parts = gaussian_parts(rng, 4, 4 * 50_000)
    comms = make(4)
    rs = on_threads(comms, lambda c, r: c.reduce_scatter(parts[r], codec="hint8"))
    ag = on_threads(comms, lambda c, r: c.allgather(parts[r][:50_000], codec="bf16"))
    sim_rs = cc.simulate.reduce_scatter(list(parts), codec="hint8")
    sim_ag = cc.simulate.allgather([p[:50_000] for p in parts], codec="bf16")
    for r in range(4):
        assert rs[r].tobytes() == sim_rs[r].tobytes(), r
        assert ag[r].tobytes() == sim_ag[r].tobytes(), r
    on_threads(comms, lambda c, r: c.close())


def test_early_messages_and_sizes():
    a, b = transports(2)
    sent = [np.arange(1000, dtype=np.uint8) * k for k in (1, 2, 3)]
    got = [np.zeros(1000, np.uint8) for _ in sent]
    sends = [a._isend(1, s.ctypes.data, s.nbytes, 7) for s in sent]  # no receive posted yet
    time.sleep(0.2)  # they arrive and wait for their receives
    recvs = [b._irecv(0, g.ctypes.data, g.nbytes, 7) for g in got]
    for t, reqs in ((a, sends), (b, recvs)):
        while reqs:
            done = t._wait_some(reqs, 5.0)
            reqs = [q for i, q in enumerate(reqs) if i not in done]
    for s, g in zip(sent, got):  # in posting order
        assert np.array_equal(s, g)
    short = np.zeros(10, np.uint8)
    send = a._isend(1, sent[0].ctypes.data, 1000, 8)
    recv = b._irecv(0, short.ctypes.data, 10, 8)
    with pytest.raises(cc.MessageError, match="expected 10 bytes from rank 0 but got 1000"):
        b._wait_some([recv], 5.0)
    assert a._wait_some([send], 5.0) == [0]


def test_closed_peer_fails_the_others_at_once(rng):
    comms = make(3, timeout=60.0)
    x = gaussian_parts(rng, 1, 100_000)[0]
    errors = {}

    def rank0():
        try:
            comms[0].allreduce(x, codec="bf16")
        except cc.CCompressError as e:
            errors[0] = e

    t = threading.Thread(target=rank0)
    t0 = time.monotonic()
    t.start()
    time.sleep(0.3)
    comms[2].close()  # rank 2 leaves: its sockets close
    del comms[2]
    import gc
    gc.collect()
    t.join(30)
    assert not t.is_alive() and time.monotonic() - t0 < 20  # not the 60 s timeout
    assert "closed its connection" in str(errors[0]) or "no message" in str(errors[0])


def test_silent_peer_times_out(rng):
    comms = make(2, timeout=1.5)
    t0 = time.monotonic()
    with pytest.raises(cc.CollectiveTimeout, match="no message arrived"):
        comms[0].allreduce(gaussian_parts(rng, 1, 100)[0])
    assert time.monotonic() - t0 < 5


def test_connect_times_out_without_peers():
    t = _core.TcpTransport(0, 2, "127.0.0.1")
    t0 = time.monotonic()
    with pytest.raises(cc.CollectiveTimeout, match="did not connect"):
        t.connect([t.address, "127.0.0.1:1"], 1.0)
    assert time.monotonic() - t0 < 5


def test_bad_listen_address_names_the_variable():
    with pytest.raises(cc.CCompressError, match="CCOMPRESS_SOCKET_IFNAME"):
        _core.TcpTransport(0, 2, "192.0.2.1")  # TEST-NET: no interface of this host has it
