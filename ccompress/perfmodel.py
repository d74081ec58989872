"""An alpha-beta model of ccompress's collectives, for choosing an algorithm and codec and for
projecting to machines we cannot measure.

Per rank, a collective moves W wire bytes over its link and spends C seconds in codec
kernels. Transfers and kernels overlap slice by slice, so

    time = max(W / bandwidth, C) + fill + latency

where ``fill`` is one slice's kernel plus one slice's transfer (the pipeline's first and last
stages cannot overlap) and ``latency`` counts the dependent message rounds times ``alpha``.
A node of ``ranks_per_node`` ranks has its own (faster) link between its ranks; on a
two-level system the inter-node link is shared by the node's ranks. Codec costs come from
measured element rates (``encode``, ``decode`` (decode-accumulate) and ``decode_out`` (the
plain decode that ends an all-gather) in elements/s per rank).

On a CPU system (``System.host``, a :class:`HostTransport`) moving bytes costs CPU too:
the host's TCP stack and the MPI library per byte and per message, shared memory per byte
inside a node, TCP/IP framing on the wire, and what a rate limit (an emulated link's tbf)
adds per byte. Codec and transport work compete for the
same cores, so there ``C`` is a rank's whole CPU time divided by the share of a core it
gets when ranks outnumber cores (``cores_per_rank``): a rank's time is bounded below by
its CPU over its core share and by its wire time. Not all of the shorter of the two hides
behind the longer there (the kernel's TCP work preempts the ranks, a rank waiting in MPI
polls): ``max`` becomes ``max(W / bandwidth, C) + (1 - overlap) * min(W / bandwidth, C)``,
``HostTransport.overlap`` fitted on rate-limited runs (MPI_Allreduce, whose steps block,
has its own smaller share, ``baseline_overlap``). GPU systems (NCCL over NVLink and
InfiniBand: DMA engines and RDMA NICs move the bytes) have ``host=None`` and no such terms.

All formulas are per rank and follow the schedules in cuda/src/collectives/.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterable, Optional, Tuple

import numpy as np

from . import _core
from .codec import Codec

ALGOS = ("ring", "two_shot", "tree", "one_shot")


@dataclass(frozen=True)
class Link:
    """One direction of a full-duplex link.

    Attributes
    ----------
    bandwidth : float
        Bytes/s.
    alpha : float
        Seconds per dependent message round.
    per_message : float, default 1e-6
        Seconds of software overhead per message a rank posts.
    """

    bandwidth: float  # bytes/s
    alpha: float      # s per dependent message round
    per_message: float = 1e-6  # s of software overhead per message a rank posts


@dataclass(frozen=True)
class CodecCost:
    """What a codec costs: wire bytes per element and kernel rates per rank.

    Attributes
    ----------
    name : str
        The codec's canonical name.
    wire_per_element : float
        Bytes on the wire per element, scales and padding included.
    encode, decode : float
        Elements/s of the encode and of the decode-accumulate.
    source : str, default "measured"
        Where the figures come from (or "datasheet assumption: ...").
    decode_out : float, optional
        Elements/s of the plain decode into an output (an all-gather's last step); None:
        ``decode``'s.
    """

    name: str
    wire_per_element: float       # bytes, scales and padding included
    encode: float                 # elements/s
    decode: float                 # elements/s (decode-accumulate)
    source: str = "measured"      # or "datasheet assumption: ..."
    decode_out: Optional[float] = None  # elements/s of the plain decode into an output (an
                                        # all-gather's last step); None: ``decode``'s

    @property
    def out_rate(self) -> float:
        """Elements/s of the plain decode into an output.

        Returns
        -------
        float
            ``decode_out``, else ``decode``.
        """
        return self.decode_out or self.decode


@dataclass(frozen=True)
class HostTransport:
    """What a transport over the host's CPU costs (MPI over TCP sockets, shared memory
    between the ranks of a node). Only for CPU systems: NCCL over NVLink / InfiniBand moves
    bytes with DMA engines and RDMA NICs, so GPU systems leave ``System.host`` at None.

    Attributes
    ----------
    tcp_per_byte : float
        Seconds of CPU per byte a rank sends over TCP: its send and the receiver's receive.
    per_message : float
        Seconds of CPU per message sent, both ends.
    shm_per_byte : float
        Seconds of CPU per byte sent through shared memory, both ends.
    node_per_byte : float, default 0.0
        Seconds of CPU per byte MPI_Allreduce moves into a node's leader and back out.
    frame : float
        Wire bytes per payload byte (Ethernet, IPv4 and TCP headers at MTU 1500).
    shaper_per_byte : float, default 0.0
        Seconds of CPU per TCP byte a rate limit adds (an emulated link's tbf).
    overlap : float, default 1.0
        Share of the shorter of a call's wire and CPU times that the executor hides.
    baseline_overlap : float, default 0.0
        The same share for MPI_Allreduce, whose steps block.
    source : str
        Where the figures come from.
    """

    tcp_per_byte: float          # s of CPU per byte a rank sends over TCP: its send and the
                                 # receiver's receive (kernel copies, protocol, MPI library)
    per_message: float           # s of CPU per message sent, both ends
    shm_per_byte: float          # s of CPU per byte sent through shared memory, both ends
    node_per_byte: float = 0.0   # s of CPU per byte MPI_Allreduce moves into a node's leader
                                 # and back out (its node-level reduce and broadcast through
                                 # shared memory, both ends, per byte of the (g-1) n sent)
    frame: float = 1514 / 1448   # wire bytes per payload byte: Ethernet + IPv4 + TCP headers
                                 # (timestamps) around a 1448-byte segment at MTU 1500
    shaper_per_byte: float = 0.0  # s of CPU per TCP byte a rate limit adds (an emulated link's
                                  # tbf: queueing, timer-driven dequeue); 0 on an unshaped link
    overlap: float = 1.0         # share of the shorter of a call's wire and CPU times that the
                                 # executor hides behind the longer (the ranks share the cores
                                 # with the kernel's TCP work, so less than all of it)
    baseline_overlap: float = 0.0  # the same share for MPI_Allreduce, whose steps block: only
                                   # what the kernel's TCP work does while a rank waits hides
    source: str = ""

    def cpu(self, tcp_bytes: float, shm_bytes: float, messages: float) -> float:
        """Seconds of CPU a rank spends moving these bytes and messages.

        Parameters
        ----------
        tcp_bytes, shm_bytes : float
            Bytes sent over TCP and through shared memory.
        messages : float
            Messages sent.

        Returns
        -------
        float
            Seconds of CPU.
        """
        return tcp_bytes * (self.tcp_per_byte + self.shaper_per_byte) \
            + shm_bytes * self.shm_per_byte + messages * self.per_message


@dataclass(frozen=True)
class System:
    """Ranks, their links and how much compute a rank gets.

    Attributes
    ----------
    name : str
        A label.
    ranks : int
        The number of ranks.
    link : Link
        Between nodes (or between all ranks on one level).
    ranks_per_node : int, default 1
        Consecutive ranks per node.
    intra : Link, optional
        Between the ranks of a node.
    cores_per_rank : float, default 1.0
        CPU runs with more ranks than cores get less than one.
    reduce_rate : float, default 2e9
        Elements/s of the engine's own uncompressed reduction.
    slice_elems : int, default 65536
        The transport's slice (MPI_SLICE_ELEMS over MPI).
    host : HostTransport, optional
        CPU systems: what moving bytes costs the CPU.
    notes : str
        Where the figures come from.
    """

    name: str
    ranks: int
    link: Link                      # between nodes (or between all ranks on one level)
    ranks_per_node: int = 1
    intra: Optional[Link] = None    # between the ranks of a node
    cores_per_rank: float = 1.0     # CPU runs with more ranks than cores get less than one
    reduce_rate: float = 2e9        # elements/s of the engine's own uncompressed reduction
    slice_elems: int = 1 << 16      # the transport's slice (MPI_SLICE_ELEMS over MPI)
    host: Optional[HostTransport] = None  # CPU systems: what moving bytes costs the CPU
    notes: str = ""

    def compute_share(self) -> float:
        """Fraction of a (codec-rate) core each rank gets.

        Returns
        -------
        float
            ``min(1, cores_per_rank)``.
        """
        return min(1.0, self.cores_per_rank)

    def link_bandwidth(self) -> float:
        """Payload bytes/s of the link between nodes.

        Returns
        -------
        float
            The link's bandwidth, framing taken off on a host TCP link.
        """
        return self.link.bandwidth / (self.host.frame if self.host else 1.0)

    def overlapped(self, wire: float, cpu: float, hidden: Optional[float] = None) -> float:
        """Seconds of a call whose wire time and CPU time overlap.

        Parameters
        ----------
        wire, cpu : float
            The call's wire and CPU seconds.
        hidden : float, optional
            The share of the shorter that overlaps (default: the executor's ``host.overlap``;
            all of it without a host transport).

        Returns
        -------
        float
            The longer of the two plus the share of the shorter that is not hidden.
        """
        if hidden is None:
            hidden = self.host.overlap if self.host else 1.0
        return max(wire, cpu) + (1.0 - hidden) * min(wire, cpu)

    def transport_time(self, tcp_bytes: float, shm_bytes: float, messages: float) -> float:
        """Wall seconds a rank's share of the cores needs for the transport's CPU work.

        Parameters
        ----------
        tcp_bytes, shm_bytes : float
            Bytes sent over TCP and through shared memory.
        messages : float
            Messages sent.

        Returns
        -------
        float
            Seconds; 0 on a system without a host transport.
        """
        if self.host is None:
            return 0.0
        return self.host.cpu(tcp_bytes, shm_bytes, messages) / self.compute_share()


def _bandwidth(system: System, pattern: str = "all_to_all") -> float:
    """Effective per-rank bandwidth of the bottleneck level. ``all_to_all`` (two_shot,
    one_shot): on two levels, the (P - g) / P of the traffic that leaves a node shares its
    link among the node's g ranks. ``ring`` (ring, tree, and NCCL's own rings and trees,
    laid out node by node): one rank per node and direction crosses the node's link, the
    others talk over the intra-node link, so the slower of the two sets the pace."""
    p, g = system.ranks, system.ranks_per_node
    link = system.link_bandwidth()
    if g <= 1 or system.intra is None:
        return link
    if pattern == "ring":
        return min(link, system.intra.bandwidth) if p > g else system.intra.bandwidth
    inter_share = (p - g) / max(p - 1, 1)
    t_inter = inter_share * g / link
    t_intra = (1 - inter_share) / system.intra.bandwidth
    return 1.0 / max(t_inter + t_intra, 1e-30)


def _tcp_share(system: System, pattern: str) -> float:
    """Share of a rank's bytes that crosses the node's link (the rest stays in shared
    memory): all of it on one level; for ``all_to_all``, the (P - g) / (P - 1) of its peers
    outside its node; for ``ring``, all of it for the busiest rank (a node's edge)."""
    p, g = system.ranks, system.ranks_per_node
    if g <= 1 or system.intra is None:
        return 1.0
    if p <= g:
        return 0.0
    return 1.0 if pattern == "ring" else (p - g) / (p - 1)


def _slices(n: float, slice_elems: int) -> int:
    return max(1, math.ceil(n / slice_elems))


def _alpha(system: System) -> float:
    return system.link.alpha if system.ranks > system.ranks_per_node else (
        system.intra.alpha if system.intra else system.link.alpha)


def collective_time(system: System, n: int, dtype_bytes: int, codec: CodecCost, algo: str) -> float:
    """Predicted seconds of one flat all-reduce.

    Parameters
    ----------
    system : System
        The ranks, links and compute.
    n : int
        Elements per rank.
    dtype_bytes : int
        Bytes per element of the user dtype.
    codec : CodecCost
        The codec's cost.
    algo : {"ring", "two_shot", "tree", "one_shot"}
        The schedule.

    Returns
    -------
    float
        Seconds.

    Raises
    ------
    ValueError
        An unknown algo.
    """
    p = system.ranks
    w = codec.wire_per_element
    pattern = "ring" if algo in ("ring", "tree") else "all_to_all"
    bw = _bandwidth(system, pattern)
    share = system.compute_share()
    enc, dec, out = codec.encode * share, codec.decode * share, codec.out_rate * share
    if p == 1:
        return n / enc + n / out
    chunk = n / p
    per_chunk, per_tensor = _slices(chunk, system.slice_elems), _slices(n, system.slice_elems)
    if algo == "two_shot":
        sent = 2 * (p - 1) * chunk * w          # all-to-all out, then the owner's copies
        kernels = n / enc + n / dec + chunk / enc + n / out
        rounds = 2
        messages = 4 * (p - 1)
        sends = 2 * (p - 1) * per_chunk
    elif algo == "ring":
        sent = 2 * (p - 1) * chunk * w
        kernels = chunk / enc + (p - 1) * chunk * (1 / enc + 1 / dec) + (p - 1) * chunk / out \
            + chunk / out
        rounds = 2 * (p - 1)
        messages = 4 * (p - 1)
        sends = 2 * (p - 1) * per_chunk
    elif algo == "one_shot":
        sent = (p - 1) * n * w
        kernels = n / enc + p * n / dec
        rounds = 1
        messages = 2 * (p - 1)
        sends = (p - 1) * per_tensor
    elif algo == "tree":
        depth = max(1, math.ceil(math.log2(p + 1)) - 1)
        sent = 3 * n * w                        # an inner node: up once, down to two children
        kernels = n / enc + 2 * n / dec + n / enc + n / out
        rounds = 2 * depth
        messages = 6
        sends = 3 * per_tensor
    else:
        raise ValueError(f"unknown algo {algo!r}; use one of {', '.join(ALGOS)}")
    transfer = sent / bw
    tcp = _tcp_share(system, pattern)
    cpu = kernels + system.transport_time(tcp * sent, (1 - tcp) * sent, sends)
    slice_n = min(system.slice_elems, max(chunk, 1))
    fill = slice_n / enc + slice_n * w / bw
    return system.overlapped(transfer, cpu) + fill + rounds * _alpha(system) \
        + messages * system.link.per_message


def hier_time(system: System, n: int, dtype_bytes: int, codec: CodecCost,
              inter_algo: str = "two_shot", intra: Optional[CodecCost] = None) -> float:
    """Predicted seconds of ``algo="hier"`` on a two-level system, the node's link shared by
    its g ranks; ``intra`` is the intra-node codec (default exact: its copies and sums at the
    engine's reduction rate).

    two_shot between nodes is one plan (cuda/src/collectives/hier.cc), its levels
    overlapping slice by slice: per rank, (g-1)/g of the tensor goes to the node's
    collectors with the intra codec, 2 (N-1)/P of it leaves the node with ``codec`` (the
    collector's node sums, then the owner's result), and the owner's result, received or
    forwarded, reaches every rank of the node (another (g-1)/g of the tensor with
    ``codec``). Time is the largest of the inter-node transfer, the intra-node transfer and
    the kernels, plus one slice of fill and the latency rounds. Other inter-node algos run
    three collectives one after the other: a reduce-scatter and an all-gather inside the
    node (together a two_shot), and the codec's flat all-reduce of the 1/g shard between.

    Parameters
    ----------
    system : System
        The ranks, links and compute.
    n : int
        Elements per rank.
    dtype_bytes : int
        Bytes per element of the user dtype.
    codec : CodecCost
        The codec between nodes.
    inter_algo : str, default "two_shot"
        The flat schedule between nodes.
    intra : CodecCost, optional
        The codec inside a node (default exact).

    Returns
    -------
    float
        Seconds.

    Raises
    ------
    ValueError
        A system without nodes of equal size > 1 and an intra-node link.
    """
    g = system.ranks_per_node
    if g <= 1 or system.intra is None or system.ranks % g:
        raise ValueError(f"{system.name}: hier needs nodes of equal size > 1 and an intra link")
    exact = intra or CodecCost("none", dtype_bytes, system.reduce_rate, system.reduce_rate)
    if inter_algo != "two_shot":
        inside = replace(system, ranks=g, link=system.intra, ranks_per_node=1, intra=None)
        between = replace(system, ranks=system.ranks // g, ranks_per_node=1, intra=None,
                          link=replace(system.link, bandwidth=system.link.bandwidth / g))
        return collective_time(inside, n, dtype_bytes, exact, "two_shot") \
            + collective_time(between, -(-n // g), dtype_bytes, codec, inter_algo)
    p, nodes = system.ranks, system.ranks // g
    share = system.compute_share()
    enc, dec, out = codec.encode * share, codec.decode * share, codec.out_rate * share
    enc_i, dec_i = exact.encode * share, exact.decode * share
    w, w_i = codec.wire_per_element, exact.wire_per_element
    link = system.link_bandwidth()
    inter_bytes = 2 * (nodes - 1) * n / p * w            # per rank, to and from other nodes
    intra_bytes = (g - 1) / g * n * (w_i + w)           # to its collectors, results, forwards
    inter = g * inter_bytes / link
    inside = intra_bytes / system.intra.bandwidth
    # intra codec: a rank encodes the (g-1)/g of its tensor that other ranks collect; a
    # collector takes g terms of n/g (its own loaded, g-1 decoded). Call's codec: the node's
    # sum of n/g encoded, the n/g of node sums decoded and summed, n/p re-encoded, and the
    # whole result decoded into the output.
    kernels = (g - 1) / g * n / enc_i + n / dec_i + (n / g + n / p) / enc + n / g / dec + n / out
    per_chunk = _slices(n / p, system.slice_elems)
    sends = (2 * (nodes - 1) + 2 * nodes * (g - 1)) * per_chunk
    cpu = kernels + system.transport_time(inter_bytes, intra_bytes, sends)
    slice_n = min(system.slice_elems, max(n / p, 1))
    fill = slice_n * (1 / enc_i + 1 / enc + w / link + w_i / system.intra.bandwidth)
    rounds = 3 * system.link.alpha + 2 * system.intra.alpha
    messages = (4 * (g - 1) + 2 * (nodes - 1) * 2) * system.link.per_message
    return system.overlapped(max(inter, inside), cpu) + fill + rounds + messages


def baseline_time(system: System, n: int, dtype_bytes: int) -> float:
    """The engine's uncompressed all-reduce, as NCCL picks it: the faster of a
    bandwidth-optimal schedule and a latency-optimal one.

    Parameters
    ----------
    system : System
        The ranks, links and compute.
    n : int
        Elements per rank.
    dtype_bytes : int
        Bytes per element of the user dtype.

    Returns
    -------
    float
        Seconds.
    """
    p, g = system.ranks, system.ranks_per_node
    if p == 1:
        return 0.0
    if system.host is not None and g > 1 and system.intra is not None and p % g == 0:
        share = system.compute_share()
        leaders = replace(system, ranks=p // g, ranks_per_node=1, intra=None)
        shm = (g - 1) * n * dtype_bytes               # into the leader, then back out
        node_cpu = 2 * shm * system.host.node_per_byte / share
        inside = max(2 * shm / system.intra.bandwidth, node_cpu) \
            + (g - 1) * n / (system.reduce_rate * share)
        return inside + baseline_time(leaders, n, dtype_bytes)
    bw = _bandwidth(system, "ring")
    add = (p - 1) / p * n / (system.reduce_rate * system.compute_share())
    ring = 2 * (p - 1) / p * n * dtype_bytes / bw + 2 * (p - 1) * _alpha(system)
    tree = 2 * n * dtype_bytes / bw + 2 * math.ceil(math.log2(p)) * _alpha(system)
    if system.host is None:
        return min(ring, tree) + add
    sent = 2 * (p - 1) / p * n * dtype_bytes
    tcp = _tcp_share(system, "ring")
    steps = 2 * math.ceil(math.log2(p))  # reduce-scatter and all-gather, recursive halving
    host = system.transport_time(tcp * sent, (1 - tcp) * sent, steps)
    return system.overlapped(min(ring, tree), add + host, system.host.baseline_overlap)


def best(system: System, n: int, dtype_bytes: int, codecs: Iterable[CodecCost],
         errors: Optional[Dict[Tuple[str, str], float]] = None,
         budget: Optional[float] = None) -> Tuple[float, str, str]:
    """The fastest (codec, algorithm) whose error is within a budget.

    Parameters
    ----------
    system : System
        The ranks, links and compute.
    n : int
        Elements per rank.
    dtype_bytes : int
        Bytes per element of the user dtype.
    codecs : iterable of CodecCost
        The candidates.
    errors : dict of (str, str) to float, optional
        ``errors[(codec, algo)]``, e.g. measured relative L2.
    budget : float, optional
        The largest error allowed; combinations without an error figure are skipped when a
        budget is given.

    Returns
    -------
    tuple of (float, str, str)
        (time, codec name, algo).

    Raises
    ------
    ValueError
        No combination meets the budget.
    """
    options = []
    for c in codecs:
        for a in ALGOS:
            if budget is not None:
                e = (errors or {}).get((c.name, a))
                if e is None or e > budget:
                    continue
            options.append((collective_time(system, n, dtype_bytes, c, a), c.name, a))
    if not options:
        raise ValueError("no codec and algorithm meets the error budget")
    return min(options)


def load_codec_costs(path: str) -> Dict[str, CodecCost]:
    """Codec costs measured by ``perf/bench/codec_throughput.py --json PATH``.

    Parameters
    ----------
    path : str
        The JSON file.

    Returns
    -------
    dict of str to CodecCost
        Keyed by codec name.
    """
    with open(path) as f:
        rows = json.load(f)
    return {r["codec"]: CodecCost(r["codec"], r["bits_per_element"] / 8,
                                  r["encode_elems_per_s"], r["decode_acc_elems_per_s"],
                                  decode_out=r.get("decode_elems_per_s"))
            for r in rows}


def choose_algo(system: System, n: int, dtype_bytes: int, codec: CodecCost,
                algos: Iterable[str] = ALGOS) -> str:
    """The algorithm the model predicts fastest for this codec.

    Parameters
    ----------
    system : System
        The ranks, links and compute.
    n : int
        Elements per rank.
    dtype_bytes : int
        Bytes per element of the user dtype.
    codec : CodecCost
        The codec's cost.
    algos : iterable of str, default ALGOS
        The candidates (ties: the earlier).

    Returns
    -------
    str
        The algorithm.
    """
    algos = list(algos)
    return min(algos, key=lambda a: (collective_time(system, n, dtype_bytes, codec, a),
                                     ALGOS.index(a)))


@dataclass(frozen=True)
class AlgoModel:
    """What ``Communicator(..., model=AlgoModel(...))`` uses to resolve ``algo="auto"``: the
    system the communicator runs on and the measured (or assumed) cost of each codec, keyed
    by codec name (``Codec.parse(spec).name``). ``system.ranks`` is replaced by the
    communicator's size. A codec without a cost falls back to the built-in size heuristic.
    Every rank must hold the same model, so that every rank picks the same algorithm (a
    rank that picks another one raises MismatchError on all ranks).

    Parameters
    ----------
    system : System
        The system the communicator runs on.
    codecs : tuple of CodecCost
        The cost of each codec the model knows.
    """

    system: System
    codecs: Tuple[CodecCost, ...] = ()

    def choose(self, n: int, dtype_bytes: int, codec_name: str, ranks: int) -> Optional[str]:
        """The flat algorithm the model predicts fastest.

        Parameters
        ----------
        n : int
            Elements per rank.
        dtype_bytes : int
            Bytes per element.
        codec_name : str
            The codec's canonical name.
        ranks : int
            The communicator's size (replaces ``system.ranks``).

        Returns
        -------
        str or None
            The algorithm, or None when the model has no cost for that codec.
        """
        for c in self.codecs:
            if c.name == codec_name:
                return choose_algo(replace(self.system, ranks=ranks), n, dtype_bytes, c)
        return None

    def choose_call(self, n: int, dtype_bytes: int, codec_name: str, ranks: int,
                    ranks_per_node: Optional[int] = None) -> Optional[Tuple[str, Optional[str]]]:
        """The schedule of one all-reduce: :meth:`choose`, or ``("hier", flat algo)`` when the
        communicator has nodes of ``ranks_per_node`` > 1 ranks, the system an intra-node link, and
        the model predicts the hierarchical schedule faster than every flat one.

        Parameters
        ----------
        n, dtype_bytes, codec_name, ranks
            As for :meth:`choose`.
        ranks_per_node : int, optional
            The communicator's consecutive ranks per node.

        Returns
        -------
        tuple of (str, str or None) or None
            (algo, inter-node algo or None); None when the model has no cost for the codec.
        """
        flat = self.choose(n, dtype_bytes, codec_name, ranks)
        g = ranks_per_node or 1
        if flat is None or g <= 1 or ranks % g or self.system.intra is None:
            return None if flat is None else (flat, None)
        c = next(c for c in self.codecs if c.name == codec_name)
        system = replace(self.system, ranks=ranks, ranks_per_node=g)
        t_flat = collective_time(system, n, dtype_bytes, c, flat)
        inter = min(ALGOS, key=lambda a: hier_time(system, n, dtype_bytes, c, a))
        if ranks // g > 1 and hier_time(system, n, dtype_bytes, c, inter) < t_flat:
            return "hier", inter
        return flat, None


def gbit(x: float) -> float:
    """Gbit/s to bytes/s.

    Parameters
    ----------
    x : float
        Gbit/s.

    Returns
    -------
    float
        Bytes/s.
    """
    return x * 1e9 / 8


# Systems we project to. Link figures are vendor line rates; alphas are typical measured
# one-way latencies; NCCL's fused reduction runs near HBM bandwidth (bf16 in and out, fp32
# math: ~6 bytes per element at ~2.7 TB/s). All are assumptions, stated with the projection.
_NVLINK = Link(450e9, 3e-6)
_GPU_REDUCE = 2680e9 / 6
SYSTEMS: Dict[str, System] = {
    "8xH100 NVLink": System("8xH100 NVLink", 8, _NVLINK, reduce_rate=_GPU_REDUCE,
                            notes="NVLink 4: 900 GB/s bidirectional per GPU (450 GB/s each way)"),
    "64 nodes x 400G IB": System("64 nodes x 400G IB", 512, Link(gbit(400), 5e-6), 8, _NVLINK,
                                 reduce_rate=_GPU_REDUCE,
                                 notes="8 GPUs per node on NVLink, one 400 Gbit/s NIC per node"),
    "100GbE cluster": System("100GbE cluster", 64, Link(gbit(100), 15e-6), 8, _NVLINK,
                             reduce_rate=_GPU_REDUCE,
                             notes="8 nodes x 8 GPUs, one 100 GbE NIC per node"),
    "25GbE cluster": System("25GbE cluster", 64, Link(gbit(25), 25e-6), 8, _NVLINK,
                            reduce_rate=_GPU_REDUCE,
                            notes="8 nodes x 8 GPUs, one 25 GbE NIC per node"),
}


def gpu_codec(name: str, wire_per_element: float, copy_gbs: float = 3350 * 0.8,
              efficiency: float = 0.7, in_bytes: int = 2) -> CodecCost:
    """Datasheet-based GPU codec rates: kernels at ``efficiency`` of copy bandwidth
    (H100 HBM3 3.35 TB/s, ~80% reachable by a copy), counting bytes read plus written.

    Parameters
    ----------
    name : str
        The codec's name.
    wire_per_element : float
        Bytes on the wire per element.
    copy_gbs : float
        Reachable copy bandwidth, GB/s.
    efficiency : float, default 0.7
        The kernels' share of it.
    in_bytes : int, default 2
        Bytes per input element (bf16).

    Returns
    -------
    CodecCost
        The assumed cost, its ``source`` saying so.
    """
    per_elem_enc = in_bytes + wire_per_element
    per_elem_dec = wire_per_element + 8  # fp32 accumulator read and written
    bw = copy_gbs * 1e9 * efficiency
    return CodecCost(name, wire_per_element, bw / per_elem_enc, bw / per_elem_dec,
                     source=f"datasheet assumption: {efficiency:.0%} of {copy_gbs:.0f} GB/s copy")


# The lab calibration of the emulated networks, data not code: calibration.json next to this
# module, with its provenance (command, machine, date; perf/RESULTS.md#cost-model-validation). VALIDATION_ERROR / VALIDATION_ERROR_MAX: median and
# max |error| of the model on held-out idle emulated runs at each link rate in Gbit/s;
# VALIDATION_ERROR_ALL: the median over all rows; EMULATED_ALPHA: s per dependent message round
# over the emulated TCP links; EMULATED_HOST: the host transport of those runs.
def _load_calibration() -> Dict[str, Any]:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration.json"),
              encoding="utf-8") as f:
        return json.load(f)


CALIBRATION = _load_calibration()
CALIBRATION_PROVENANCE: Dict[str, str] = CALIBRATION["provenance"]
VALIDATION_ERROR = {float(k): v for k, v in CALIBRATION["validation_error"].items()}
VALIDATION_ERROR_MAX = {float(k): v for k, v in CALIBRATION["validation_error_max"].items()}
VALIDATION_ERROR_ALL = CALIBRATION["validation_error_all"]
VALIDATION_SOURCE = CALIBRATION["validation_source"]
EMULATED_ALPHA = CALIBRATION["emulated_alpha"]
EMULATED_HOST = HostTransport(**CALIBRATION["emulated_host"])


def _mpi_slice_elems() -> int:
    """The MPI transport's default slice, MpiTransport::kSliceElems, from the MPI module
    (loaded on first use: it loads libmpi)."""
    from . import _mpi

    return int(_mpi.SLICE_ELEMS)


def __getattr__(name: str) -> Any:
    # MPI_SLICE_ELEMS: the MPI transport's default slice (MpiTransport::kSliceElems,
    # cuda/src/transport/mpi_transport.h), read from the binding when first asked for.
    if name == "MPI_SLICE_ELEMS":
        return _mpi_slice_elems()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

def validation_error(gbit_rate: float, worst: bool = False) -> Optional[float]:
    """The model's measured error at the validated link rate nearest ``gbit_rate``.

    Parameters
    ----------
    gbit_rate : float
        The link rate, Gbit/s.
    worst : bool, default False
        The largest |error| instead of the median.

    Returns
    -------
    float or None
        The relative error, or None when it was never validated within a factor of 2 of
        that rate.
    """
    table = VALIDATION_ERROR_MAX if worst else VALIDATION_ERROR
    near = min(table, key=lambda r: abs(math.log(r / gbit_rate)))
    return table[near] if abs(math.log(near / gbit_rate)) <= math.log(2) else None


def emulated_system(ranks: int, gbit_rate: float, cores: int, ranks_per_node: int = 1,
                    intra_gbs: float = 4.0, reduce_rate: float = 2e9) -> System:
    """The system the model was validated on (perf/bench/emulated_net.py): ``ranks`` MPI ranks in
    nodes of ``ranks_per_node``, each node's full-duplex link at ``gbit_rate`` (alpha 50 us)
    shared by its ranks, shared memory at ``intra_gbs`` GB/s inside a node, all ranks sharing
    ``cores`` cores, MPI's slice, the emulated host transport (EMULATED_HOST, its shaper's
    CPU included: every link of these runs is rate-limited), and MPI's
    reduction at ``reduce_rate`` elements/s (e.g. the ``none`` codec's decode-accumulate).

    Parameters
    ----------
    ranks : int
        MPI ranks.
    gbit_rate : float
        Each node's link, Gbit/s.
    cores : int
        The cores all ranks share.
    ranks_per_node : int, default 1
        Ranks per node.
    intra_gbs : float, default 4.0
        Shared memory inside a node, GB/s.
    reduce_rate : float, default 2e9
        MPI's reduction, elements/s.

    Returns
    -------
    System
        The system.
    """
    intra = Link(intra_gbs * 1e9, 5e-6) if ranks_per_node > 1 else None
    return System(f"{ranks} ranks, {gbit_rate:g} Gbit/s", ranks,
                  Link(gbit(gbit_rate), EMULATED_ALPHA), ranks_per_node, intra,
                  cores_per_rank=cores / ranks, reduce_rate=reduce_rate,
                  slice_elems=_mpi_slice_elems(), host=EMULATED_HOST)


def measure_codec_cost(spec: str, n: int = 1 << 22, reps: int = 3) -> CodecCost:
    """Single-thread encode, decode-accumulate and plain decode rates of a codec on this
    machine, on float32 Gaussian elements through the codec's kernels.

    Parameters
    ----------
    spec : str
        The codec spec.
    n : int, default 4194304
        Elements per measurement.
    reps : int, default 3
        Repetitions (the median is kept).

    Returns
    -------
    CodecCost
        The measured cost.
    """
    codec = Codec.parse(spec)
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    buf = codec.encode(x)
    acc = np.zeros(n, np.float32)
    bound = codec._c.bind("float32")

    def rate(fn) -> float:
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return n / statistics.median(times)

    return CodecCost(codec.name, buf.size / n, rate(lambda: codec.encode(x)),
                     rate(lambda: _core.decode_accumulate(bound, buf.ctypes.data, n,
                                                          acc.ctypes.data, False)),
                     source="measured here, one thread, encode, decode-accumulate, decode",
                     decode_out=rate(lambda: codec.decode(buf, n, "float32")))
