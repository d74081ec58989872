"""CPU time the host's TCP stack spends per byte and per message: the host-transport terms of
the cost model (ccompress.perfmodel.HostTransport).

    .venv/bin/python -m perf.bench.tcp_cpu [--bytes 64M] [--messages 64K,256K,1M] [--reps 3] \
        [--netns] [--json out]

Two processes on this machine move ``--bytes`` over one TCP connection, in messages of each size of ``--messages`` (the receiver reads each message in
full, as a transport's posted receive does). The CPU time of both processes (user + system,
``getrusage``: the kernel's copies and protocol work are system time of the process that
makes the call, softirq work included when it runs in that process's context) is what one
rank's sends plus another rank's receives cost. A least-squares fit over the message sizes
splits it into seconds per byte and seconds per message. CPU time, not wall time, so a
machine shared with other jobs gives comparable figures (cache contention aside).

Path: the loopback interface by default; with ``--netns`` (root), the path of
perf/bench/emulated_net.py without its rate limit: two network namespaces, each on a veth pair
into one bridge (its Network class, removed at exit). Loopback leaves out the veths and the
bridge, so its per-byte figure is a lower bound for the emulated network's. With ``--gbps R``
the veths carry emulated_net.py's shaper (tbf) at R Gbit/s: the difference to ``--netns``
alone is the shaper's CPU per byte (the model's ``HostTransport.shaper_per_byte``). The
``machine ns/byte`` column is every core's busy time (/proc/stat) over the transfer, the
kernel's work outside both processes included, but also whatever else the machine does
meanwhile: printed for comparison only.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import socket
import statistics
import sys
from typing import Callable, Dict, List, Optional, Tuple

from ccompress.tools.perf import parse_size

CLONE_NEWNET = 0x40000000


def machine_busy_seconds() -> float:
    """CPU seconds all of this machine's cores have been busy since boot (/proc/stat: user,
    nice, system, irq, softirq, steal): counts the kernel's work outside any process too,
    e.g. a shaper's timer-driven softirqs."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def receive(sock: socket.socket, total: int, message: int) -> None:
    buf = memoryview(bytearray(message))
    left = total
    while left:
        want = min(message, left)
        got = 0
        while got < want:
            k = sock.recv_into(buf[got:want])
            if not k:
                raise ConnectionError("sender closed early")
            got += k
        left -= want


def enter_netns(name: Optional[str]) -> None:
    """Moves this process into network namespace ``name`` (one this script created)."""
    if name is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    with open(f"/var/run/netns/{name}") as f:
        if libc.setns(f.fileno(), CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), f"setns into {name}")


def in_child(fn: Callable[[], float], netns: Optional[str]) -> Tuple[int, int]:
    """Forks a process that enters ``netns``, runs ``fn`` and writes its result to a pipe;
    returns (pid, read end)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(rfd)
            enter_netns(netns)
            os.write(wfd, repr(fn()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(wfd)
    return pid, rfd


def collect(pid: int, rfd: int) -> float:
    text = os.read(rfd, 64).decode()
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    if status or not text:
        raise RuntimeError("a transfer process failed")
    return float(text)


def one_transfer(total: int, message: int, ends=(None, None)) -> Tuple[float, float]:
    """(sender CPU s, receiver CPU s) for ``total`` bytes in ``message``-byte messages; ``ends``:
    (namespace, address) of the sender and of the receiver, (None, None) for loopback."""
    (send_ns, _), (recv_ns, recv_addr) = ends if ends[0] else ((None, None), (None, None))
    addr = recv_addr or "127.0.0.1"
    ready_r, ready_w = os.pipe()

    def serve() -> float:
        server = socket.socket()
        server.bind((addr, 0))
        server.listen(1)
        os.write(ready_w, str(server.getsockname()[1]).encode())
        conn, _ = server.accept()
        t0 = cpu_seconds()
        receive(conn, total, message)
        t = cpu_seconds() - t0
        conn.sendall(b"k")
        return t

    def send(port: int) -> float:
        sock = socket.create_connection((addr, port))
        payload = memoryview(bytearray(os.urandom(1 << 16)) * (message // (1 << 16) + 1))
        t0 = cpu_seconds()
        left = total
        while left:
            sock.sendall(payload[:min(message, left)])
            left -= min(message, left)
        sock.recv(1)  # the receiver has everything
        return cpu_seconds() - t0

    receiver = in_child(serve, recv_ns)
    os.close(ready_w)
    port = int(os.read(ready_r, 16).decode())
    os.close(ready_r)
    sender = in_child(lambda: send(port), send_ns)
    return collect(*sender), collect(*receiver)


def mpi_transfer(total: int, message: int) -> Tuple[float, float]:
    """The same through MPI (mpi4py, two ranks under mpiexec): rank 0 posts its sends, rank 1
    its receives, every message in flight at once as the collectives' slices are; returns
    (rank 0's CPU s, rank 1's) on rank 0. A rank waiting in MPI polls, so this CPU time
    counts the library's progress loop too."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    buf = bytearray(total)
    comm.Barrier()
    t0 = cpu_seconds()
    view = memoryview(buf)
    reqs = [(comm.Isend if comm.rank == 0 else comm.Irecv)(
        [view[o:o + message], MPI.BYTE], 1 - comm.rank, 7) for o in range(0, total, message)]
    MPI.Request.Waitall(reqs)
    t = cpu_seconds() - t0
    both = comm.gather(t, 0)
    return (both[0], both[1]) if comm.rank == 0 else (0.0, 0.0)


def veth_ends(gbit: Optional[float] = None) -> Tuple[Tuple[str, str], Tuple[str, str]]:
    """Two namespaces joined through a bridge, as perf/bench/emulated_net.py builds them, its
    shaper at ``gbit`` when given (else no rate limit): ((namespace, address), (namespace,
    address)) of the two ends."""
    from perf.bench.emulated_net import TBF, Network, tbf_setting

    net = Network(2)
    net.create()
    if gbit:
        net.limit(gbit, *tbf_setting(TBF, gbit))
    return (net.ns[0], net.address(0)), (net.ns[1], net.address(1))


def fit(points: List[Tuple[int, float]], total: int) -> Tuple[float, float]:
    """(s per byte, s per message) from (message size, CPU s for ``total`` bytes): CPU =
    total * per_byte + total / message * per_message, least squares."""
    xs = [total / m for m, _ in points]
    ys = [t for _, t in points]
    if len(points) == 1:
        return ys[0] / total, 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    per_message = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    per_message = max(per_message, 0.0)
    return (my - per_message * mx) / total, per_message


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", default="64M", help="bytes per transfer (K/M/G suffix)")
    ap.add_argument("--messages", default="64K,256K,1M", help="message sizes, comma separated")
    ap.add_argument("--reps", type=int, default=3, help="transfers per size (median taken)")
    ap.add_argument("--netns", action="store_true",
                    help="through two namespaces and a bridge (perf/bench/emulated_net.py's path, "
                         "unlimited) instead of loopback; needs root")
    ap.add_argument("--gbps", type=float,
                    help="--netns: with emulated_net.py's shaper at this rate on both veths")
    ap.add_argument("--mpi", action="store_true",
                    help="through MPI between two ranks (run under mpiexec -n 2): shared "
                         "memory, or TCP over loopback with MPIR_CVAR_NOLOCAL=1")
    ap.add_argument("--json", help="write the fit and the raw figures here")
    args = ap.parse_args(argv)
    if args.gbps and not args.netns:
        ap.error("--gbps shapes the namespaces' veths: it needs --netns")
    total = parse_size(args.bytes)
    sizes = [parse_size(s) for s in args.messages.split(",")]
    ends = veth_ends(args.gbps) if args.netns else (None, None)
    path = "two namespaces through veths and a bridge" if args.netns else "loopback"
    if args.netns and args.gbps:
        path += f", shaped at {args.gbps:g} Gbit/s"
    transfer = lambda t, m: one_transfer(t, m, ends)  # noqa: E731
    if args.mpi:
        from mpi4py import MPI

        path = f"MPI between 2 ranks ({'TCP' if os.environ.get('MPIR_CVAR_NOLOCAL') else 'shared memory'})"
        transfer = mpi_transfer
        if MPI.COMM_WORLD.rank:
            for m in sizes:
                for _ in range(args.reps):
                    mpi_transfer(total, m)
            return 0
    print(f"# TCP over {path}, {total} bytes per transfer, {os.cpu_count()} cpus; "
          f"CPU time of sender + receiver, median of {args.reps}")
    print(f"{'message':>9} {'send ms':>8} {'recv ms':>8} {'ns/byte':>8} {'machine ns/byte':>16}")
    points: List[Tuple[int, float]] = []
    raw: Dict[str, List[List[float]]] = {}
    machine: Dict[str, float] = {}
    for m in sizes:
        runs, busy = [], []
        for _ in range(args.reps):
            b0 = machine_busy_seconds()
            runs.append(transfer(total, m))
            busy.append(machine_busy_seconds() - b0)
        raw[str(m)] = [list(r) for r in runs]
        machine[str(m)] = statistics.median(busy) / total
        t = statistics.median(s + r for s, r in runs)
        points.append((m, t))
        print(f"{m:9d} {statistics.median(s for s, _ in runs) * 1e3:8.1f} "
              f"{statistics.median(r for _, r in runs) * 1e3:8.1f} {t / total * 1e9:8.3f} "
              f"{machine[str(m)] * 1e9:16.3f}")
    per_byte, per_message = fit(points, total)
    print(f"# fit: {per_byte * 1e9:.3f} ns per byte, {per_message * 1e6:.2f} us per message "
          "(sender + receiver)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"path": path, "bytes": total, "cpus": os.cpu_count(), "per_byte_s": per_byte,
                       "per_message_s": per_message, "raw_cpu_s": raw,
                       "gbps": args.gbps, "machine_busy_s_per_byte": machine}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
