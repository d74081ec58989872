"""Where the hierarchical all-reduce pays: the cost model (ccompress.perfmodel) validated on
emulated two-level networks, then projected to GPU clusters.

    .venv/bin/python -m perf.model.hier_projection                       # projection only
    .venv/bin/python -m perf.model.hier_projection --emulated build/hier_emulated.json \
        --throughput build/codec_cpu.json --intra-gbs 4              # validation too

Validation (perf/model/model_report.py's, one function for both) models an `emulated_net.py
--ranks-per-node G` run as it was: each namespace's link at the tbf rate shared by its G
ranks (alpha 50 us), shared memory between the ranks of a node at --intra-gbs GB/s, the
ranks sharing this machine's cores at the single-thread codec rates of codec_throughput.py
(its `none` row for the exact levels inside a node), MPI's slice and the CPU the host
transport costs (perfmodel.EMULATED_HOST). hier rows are the one-plan schedule (two_shot
between nodes, levels overlapped: perfmodel.hier_time). The projection puts 8 GPUs per node on NVLink 4 (450 GB/s each
way) and one 400 Gbit/s InfiniBand NIC per node, with GPU codec rates from the H100
datasheet (marked; perf/results/gpu.md has the measured H200 rates, far lower), against NCCL's uncompressed all-reduce
(bf16, the faster of ring and tree). GPU systems have no host-transport term (NCCL's
bytes move by DMA and RDMA, not through the CPU).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from ccompress import Codec
from ccompress.tools import perfmodel as pm

from perf.model import model_report  # noqa: E402  (perf/model/model_report.py: the validation)

WORKLOADS = {  # elements, bf16
    "DP bucket 25 MB": 25 * (1 << 20) // 2,
    "DP grads 7B": 7_000_000_000,
    "DP grads 70B": 70_000_000_000,
}
TP = ("TP act 4096x8192, 16 GPUs", 4096 * 8192)  # a tensor-parallel group over 2 nodes
NODES = (8, 64, 512)
GPU_CODECS = ("fp8_e4m3:g128", "hint8", "nvfp4")
# ring re-quantizes at every hop (its error grows with the rank count: 512 quantizations at
# 512 ranks), so the projection compares the schedules whose error does not: two_shot (2)
# and tree (log2 p + 1).
ALGOS = ("two_shot", "tree")


def project() -> None:
    codecs = [pm.gpu_codec(spec, Codec.parse(spec).wire_bytes(1 << 20, "bfloat16") / (1 << 20))
              for spec in GPU_CODECS]
    print(f"\n# projection: 8 GPUs per node (NVLink 4, 450 GB/s each way), one 400 Gbit/s IB NIC "
          f"per node; codec rates: {codecs[0].source} (H100 datasheet, not measured)")
    head = " ".join(f"{c.name.split(':')[0] + ' flat':>11} {'hier':>6}" for c in codecs)
    print(f"{'nodes':>5} {'workload':>25} {'NCCL ms':>9} {head}  best")
    for nodes in NODES:
        system = pm.System(f"{nodes} nodes", 8 * nodes, pm.Link(pm.gbit(400), 5e-6), 8,
                           pm.Link(450e9, 3e-6), reduce_rate=2680e9 / 6)
        rows = list(WORKLOADS.items()) + ([TP] if nodes == NODES[0] else [])
        for wname, n in rows:
            tp = wname.startswith("TP")
            sys_w = replace(system, ranks=16) if tp else system
            base = pm.baseline_time(sys_w, n, 2)
            cells, options = [], [(base, "exact NCCL")]
            for c in codecs:
                flat = min((pm.collective_time(sys_w, n, 2, c, a), a) for a in ALGOS)
                hier = min((pm.hier_time(sys_w, n, 2, c, a), a) for a in ALGOS)
                cells.append(f"{base / flat[0]:10.2f}x {base / hier[0]:5.2f}x")
                options += [(flat[0], f"{c.name} {flat[1]}"), (hier[0], f"{c.name} hier/{hier[1]}")]
            print(f"{'2' if tp else nodes:>5} {wname:>25} {base * 1e3:9.3f} {' '.join(cells)}  "
                  f"{min(options)[1]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emulated", help="JSON from perf/bench/emulated_net.py --ranks-per-node G --json")
    ap.add_argument("--throughput", action="append", default=[],
                    help="JSON from perf/bench/codec_throughput.py --json (repeatable)")
    ap.add_argument("--intra-gbs", type=float, default=4.0,
                    help="GB/s between the ranks of an emulated node (shared memory)")
    args = ap.parse_args(argv)
    if args.emulated and args.throughput:
        model_report.validate([args.emulated], model_report.load_costs(args.throughput),
                              args.intra_gbs)
    project()
    return 0


if __name__ == "__main__":
    sys.exit(main())
