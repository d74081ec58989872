"""Node topology of a communicator: how many consecutive ranks share a node, for
``algo="hier"`` (exact inside a node, compressed between nodes).

A communicator learns it from an explicit ``ranks_per_node=`` (every constructor), else from
MPI (``MPI_Comm_split_type`` shared memory) or torchrun (``LOCAL_WORLD_SIZE``). Nodes must
be equal and their ranks consecutive (rank r on node r // ranks_per_node), which is how
torchrun and mpiexec place ranks by default; anything else raises when ``algo="hier"`` is
asked for, never silently."""
from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from .errors import InvalidArgument, Unsupported


def check(ranks_per_node: Optional[int], size: int) -> Optional[int]:
    """``ranks_per_node`` validated against the communicator's size (None stays None)."""
    if ranks_per_node is None:
        return None
    if isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int) \
            or ranks_per_node < 1:
        raise InvalidArgument(f"ranks_per_node must be a positive int, got {ranks_per_node!r}")
    if size % ranks_per_node:
        raise Unsupported(f"{size} ranks do not form nodes of {ranks_per_node}: algo='hier' "
                          "needs nodes of equal size (a flat algo works on any layout)")
    return ranks_per_node


def from_node_ids(node_of_rank: List[Any]) -> int:
    """Ranks per node from every rank's node identity (a host name, an MPI shared-memory
    group's leader), in rank order; raises Unsupported unless the nodes are consecutive
    blocks of one size."""
    size = len(node_of_rank)
    first = node_of_rank[0]
    g = next((i for i, v in enumerate(node_of_rank) if v != first), size)
    blocks = [node_of_rank[i:i + g] for i in range(0, size, g)]
    if size % g or any(len(set(b)) != 1 for b in blocks) \
            or len({b[0] for b in blocks}) != len(blocks):
        counts = {v: node_of_rank.count(v) for v in dict.fromkeys(node_of_rank)}
        raise Unsupported(
            "the ranks' nodes are not consecutive blocks of one size (ranks per node: "
            f"{list(counts.values())}); pass ranks_per_node= explicitly, or launch so that "
            "each node holds the same number of consecutive ranks")
    return g


def mpi_node(comm: Any) -> Tuple[int, Optional[int]]:
    """(this rank's rank on its node, ranks per node) of an mpi4py communicator, from its
    shared-memory split (collective); ranks per node is None when its nodes are not
    consecutive blocks of one size."""
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        leader = local.bcast(comm.Get_rank(), root=0)
        local_rank = local.Get_rank()
    finally:
        local.Free()
    try:
        return local_rank, from_node_ids(comm.allgather(leader))
    except Unsupported:
        return local_rank, None  # not consecutive blocks: hier will ask for ranks_per_node=


def from_mpi(comm: Any) -> Optional[int]:
    """Ranks per node of an mpi4py communicator (:func:`mpi_node`; collective)."""
    return mpi_node(comm)[1]


def from_env(size: int) -> Optional[int]:
    """torchrun's LOCAL_WORLD_SIZE, when it is set and divides ``size``."""
    text = os.environ.get("LOCAL_WORLD_SIZE")
    if not text:
        return None
    try:
        g = int(text)
    except ValueError:
        raise InvalidArgument(f"LOCAL_WORLD_SIZE={text!r} is not an integer") from None
    return check(g, size)


def levels(algo: Optional[str], ranks_per_node: Optional[int], intra_codec: Any,
           inter_algo: Optional[str]) -> dict:
    """The CallSpec arguments of the hierarchical levels; refuses them for a flat algo, and
    refuses algo="hier" when the communicator does not know its nodes."""
    if algo != "hier":
        if intra_codec is not None or inter_algo is not None:
            raise InvalidArgument("intra_codec and inter_algo apply to algo='hier' only "
                                  f"(got algo={algo!r})")
        return {}
    if ranks_per_node is None:
        raise InvalidArgument(
            "algo='hier' needs the node topology: pass ranks_per_node= when making the "
            "communicator (from_mpi finds it when each node holds consecutive ranks; "
            "under torchrun, LOCAL_WORLD_SIZE gives it)")
    out = {"ranks_per_node": ranks_per_node, "inter_algo": inter_algo}
    if intra_codec is not None:
        out["intra_codec"] = intra_codec  # a spec: the communicator parses it (codec layer)
    return out


def schedule_args(algo: Optional[str], intra_codec: Any) -> dict:
    """The algo (None: flat, or "hier") and level arguments of reduce_scatter and allgather,
    which have one flat schedule each."""
    if algo not in (None, "hier"):
        raise InvalidArgument(f"reduce_scatter and allgather take algo=None (flat) or 'hier'; "
                              f"got {algo!r}")
    if algo is None and intra_codec is not None:
        raise InvalidArgument("intra_codec applies to algo='hier' only")
    return {} if algo is None else {"algo": algo, "hier": (intra_codec, None)}
