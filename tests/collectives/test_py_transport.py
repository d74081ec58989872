"""_core.PyTransport, the C++ transport over Python point-to-point callables that
Communicator.from_torch puts over gloo, checked here without torch: ranks as threads over a
small Python mailbox. The same bits as ccompress.simulate for every algo, Python errors
reaching the caller as the matching ccompress error, a silent peer a CollectiveTimeout."""
import threading
import time

import numpy as np
import pytest

import ccompress as cc
from ccompress import _core
from ccompress.communicator import on_threads
from helpers.common import gaussian_parts


class Mailbox:
    """Shared by the ranks: a send and a receive of the same (src, dst, tag) match in
    posting order; the second to arrive copies the bytes."""

    def __init__(self, size):
        self.cv = threading.Condition()
        self.posted = {}  # (src, dst, tag, kind) -> [state]
        self.barrier = threading.Barrier(size)


class State:
    def __init__(self, view):
        self.view, self.done = view, False


class Ops:
    """What PyTransport calls, for rank ``rank`` of ``box``."""

    def __init__(self, box, rank, fail_test=None):
        self.box, self.rank, self.fail_test = box, rank, fail_test
        self.reqs, self.next = {}, 1

    def _post(self, kind, peer, view, tag):
        src, dst = (self.rank, peer) if kind == "send" else (peer, self.rank)
        other = "recv" if kind == "send" else "send"
        st = State(view)
        with self.box.cv:
            queue = self.box.posted.setdefault((src, dst, tag, other), [])
            if queue:
                peer_st = queue.pop(0)
                send, recv = (st, peer_st) if kind == "send" else (peer_st, st)
                assert len(send.view) == len(recv.view)
                recv.view[:] = send.view
                st.done = peer_st.done = True
                self.box.cv.notify_all()
            else:
                self.box.posted.setdefault((src, dst, tag, kind), []).append(st)
        h, self.next = self.next, self.next + 1
        self.reqs[h] = st
        return h

    def isend(self, peer, view, tag):
        return self._post("send", peer, view, tag)

    def irecv(self, peer, view, tag):
        return self._post("recv", peer, view, tag)

    def test(self, handles):
        if self.fail_test is not None:
            raise self.fail_test
        with self.box.cv:
            done = [i for i, h in enumerate(handles) if self.reqs[h].done]
        for i in done:
            del self.reqs[handles[i]]
        return done

    def wait(self, handles, timeout_s):
        with self.box.cv:
            self.box.cv.wait_for(lambda: any(self.reqs[h].done for h in handles), timeout_s)
        return self.test(handles)

    def cancel(self, handles):
        with self.box.cv:
            for h in handles:
                st = self.reqs.pop(h, None)
                for q in self.box.posted.values():
                    if st in q:
                        q.remove(st)

    def barrier(self, timeout_s):
        self.box.barrier.wait(timeout_s)


def make(size, timeout=30.0, fail_test=None):
    """``fail_test``: {rank: the exception that rank's test() raises}."""
    box = Mailbox(size)
    ops = [Ops(box, r, (fail_test or {}).get(r)) for r in range(size)]
    # Small slices: many messages in flight at once.
    comms = [cc.Communicator(_core.PyTransport(o, r, size, "pytest"), timeout=timeout,
                             slice_elems=2048) for r, o in enumerate(ops)]
    return ops, comms


@pytest.mark.parametrize("algo", ["ring", "two_shot", "tree", "one_shot"])
def test_same_bits_as_simulate(rng, algo):
    parts = gaussian_parts(rng, 3, 10_007)
    ops, comms = make(3)
    outs = on_threads(comms, lambda c, r: c.allreduce(parts[r], codec="fp8_e4m3:g128",
                                                      algo=algo))
    sim = cc.simulate.allreduce(list(parts), codec="fp8_e4m3:g128", algo=algo)
    for r in range(3):
        assert outs[r].tobytes() == sim[r].tobytes(), r
    assert all(c.transport == "pytest" and c.bytes_sent > 0 for c in comms)
    assert all(not o.reqs for o in ops)  # every request completed and released
    on_threads(comms, lambda c, r: c.barrier())


def test_python_error_becomes_ccompress_error(rng):
    parts = gaussian_parts(rng, 2, 1000)
    ops, comms = make(2, timeout=2.0, fail_test={1: cc.MessageError("bad bytes")})
    errors = [None, None]

    def body(c, r):
        try:
            c.allreduce(parts[r], codec="bf16")
        except cc.CCompressError as e:
            errors[r] = e

    on_threads(comms, body)
    assert isinstance(errors[1], cc.MessageError) and "bad bytes" in str(errors[1])
    assert isinstance(errors[0], cc.CollectiveTimeout), errors[0]
    assert not comms[0].usable and not comms[1].usable
    with pytest.raises(cc.CCompressError, match="unusable"):
        comms[0].allreduce(parts[0])


def test_silent_peer_times_out(rng):
    ops, comms = make(2, timeout=1.5)
    t0 = time.monotonic()
    with pytest.raises(cc.CollectiveTimeout, match="no message arrived"):
        comms[0].allreduce(gaussian_parts(rng, 1, 100)[0])
    assert time.monotonic() - t0 < 5
    assert not any(ops[0].box.posted.values())  # the withdrawn requests are gone
