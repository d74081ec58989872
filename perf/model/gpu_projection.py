"""GPU-cluster projection of compressed all-reduce from the cost model (ccompress.perfmodel).

    .venv/bin/python -m perf.model.gpu_projection [--kernels perf/gpu/kernels.json] [--md]

Two deployments:
  - 8xH100 on NVLink, tensor-parallel activations (one all-reduce per layer half, bf16,
    sequence x hidden of a 7B (hidden 4096) or 70B (hidden 8192) model);
  - 64 nodes on 400 Gbit/s InfiniBand, data-parallel gradient buckets (25 MB, bf16) of a 7B
    model (pure data parallel on 512 GPUs: NVLink reduce-scatter in the node, the inter-node
    all-reduce of each GPU's eighth of the bucket, NVLink all-gather) and of a 70B model
    (tensor parallel 8 in the node, so each GPU all-reduces whole buckets of its 8.75B
    parameters across the 64 nodes). The 8 GPUs of a node run their inter-node all-reduces at
    once and share the node's NICs: one 400G NIC per node, or eight (one per GPU, DGX H100).
Compression is applied to the inter-node step only; NVLink steps are NCCL's, uncompressed.

Codec kernel rates come from perf/gpu/kernels.json, which perf/bench/gpu_bench.py writes
(perf/gpu_check.sh on a GPU; its bfloat16 encode and decode_accumulate rows), or the file
--kernels names. Where that file is missing (no GPU has measured the kernels yet) the script
says so and takes rates from the H100 datasheet (perfmodel.gpu_codec: 70% of the reachable
copy bandwidth), and every such row says "datasheet". The baseline is NCCL's uncompressed
bf16 all-reduce as the model has it (the better of ring and tree, reduction at HBM speed).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ccompress import Codec
from ccompress import perfmodel as pm

CODECS = [("bf16", "none"), ("fp8_e4m3:g128", "fp8_e4m3:g128"), ("hint8", "hint8"),
          ("nvfp4", "nvfp4"), ("mxfp8", "mxfp8"), ("mxfp4", "mxfp4")]
KERNELS_JSON = Path(__file__).resolve().parents[1] / "gpu" / "kernels.json"
PAYS, LOSES = 1.10, 1.0  # speedup at or above: pays; below LOSES: compression costs time
BUCKET = 25 * 10**6 // 2  # elements of a 25 MB bf16 bucket (PyTorch DDP's default size)
IB_ALPHA = 5e-6


def measured_rates(path: Optional[str]) -> Dict[Tuple[str, str], float]:
    """{(codec, kernel): bytes/s read + written} of the bfloat16 rows of a kernels.json
    (perf/bench/gpu_bench.py's shape: {"device", ..., "kernels": [{"codec", "kernel",
    "dtype", "gbps"}], ...}); empty, with a line on stderr, when the file does not exist."""
    p = Path(path) if path else KERNELS_JSON
    if not p.exists():
        print(f"# {p} is missing: no GPU has measured the kernels yet, so every row uses "
              "datasheet rates (perf/gpu_check.sh on a GPU writes it)", file=sys.stderr)
        return {}
    doc = json.loads(p.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("kernels"), list):
        raise SystemExit(f"{p}: not a kernels.json of perf/bench/gpu_bench.py (an object with "
                         "a 'kernels' list); re-run perf/gpu_check.sh")
    print(f"# measured rates: {p} ({doc.get('device')}, driver {doc.get('driver')}, commit "
          f"{doc.get('commit')}, {doc.get('date')})", file=sys.stderr)
    return {(r["codec"], r["kernel"]): r["gbps"] * 1e9 for r in doc["kernels"]
            if r.get("dtype") == "bfloat16"}


def codec_costs(kernels: Optional[str]) -> List[pm.CodecCost]:
    """One CodecCost per codec: measured rates from kernels.json where it has the codec,
    else datasheet ones (marked in .source)."""
    measured = measured_rates(kernels)
    out = []
    for label, spec in CODECS:
        w = Codec.parse(spec).wire_bytes(1 << 20, "bfloat16") / (1 << 20)
        cost = pm.gpu_codec(label, w)
        enc, dec = measured.get((spec, "encode")), measured.get((spec, "decode_accumulate"))
        if enc and dec:  # bytes/s -> elements/s with the byte counts gpu_bench.py uses
            cost = pm.CodecCost(label, w, enc / (2 + w), dec / (w + 4), source="measured")
        out.append(cost)
    return out


def nvlink_rs_ag(n: int) -> float:
    """NCCL's uncompressed reduce-scatter plus all-gather of n bf16 elements over 8 GPUs on
    NVLink: each moves 7/8 of the data once."""
    link = pm.SYSTEMS["8xH100 NVLink"].link
    return 2 * (7 / 8 * n * 2 / link.bandwidth + 7 * link.alpha)


def inter_node(nics: int) -> pm.System:
    """A GPU's data-parallel group across 64 nodes: one rank per node, its link the GPU's
    share of the node's NICs (8 groups per node at once)."""
    return pm.System(f"64 nodes, {nics}x400G/node", 64, pm.Link(pm.gbit(400) * nics / 8, IB_ALPHA),
                     reduce_rate=pm.SYSTEMS["8xH100 NVLink"].reduce_rate)


def rows(codecs: List[pm.CodecCost]):
    """(system, workload, MiB per GPU, codec, algo, ms, baseline ms, source)."""
    tp = pm.SYSTEMS["8xH100 NVLink"]
    workloads = [(tp, f"TP act {m} {t}x{h}", t * h, 0.0)
                 for m, h in (("7B", 4096), ("70B", 8192)) for t in (4096, 512, 32)]
    for nics in (1, 8):
        system = inter_node(nics)
        workloads += [(system, "DP 7B bucket (1/8 per GPU)", BUCKET // 8, nvlink_rs_ag(BUCKET)),
                      (system, "DP 70B/TP8 bucket", BUCKET, 0.0)]
    for system, name, n, local in workloads:
        base = pm.baseline_time(system, n, 2) + local
        for c in codecs:
            t, algo = min((pm.collective_time(system, n, 2, c, a), a)
                          for a in ("ring", "two_shot", "tree"))
            yield (system.name, name, n * 2 / 2**20, c.name, algo, (t + local) * 1e3,
                   base * 1e3, c.source)


def verdict(speedup: float) -> str:
    return "pays" if speedup >= PAYS else ("loses" if speedup < LOSES else "marginal")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", help="kernels.json of perf/bench/gpu_bench.py (measured rates; "
                    "default perf/gpu/kernels.json)")
    ap.add_argument("--md", action="store_true", help="a Markdown table")
    a = ap.parse_args(argv)
    codecs = codec_costs(a.kernels)
    table = list(rows(codecs))
    head = ["system", "workload", "MiB/GPU", "codec", "algo", "ms", "NCCL bf16 ms", "speedup",
            "verdict", "rates"]
    lines = []
    for s, w, mib, c, algo, ms, base, src in table:
        lines.append([s, w, f"{mib:.2f}", c, algo, f"{ms:.3f}", f"{base:.3f}",
                      f"{base / ms:.2f}x", verdict(base / ms),
                      "measured" if src == "measured" else "datasheet"])
    if a.md:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *lines)]
        for line in [head] + lines:
            print("  ".join(x.rjust(wd) for x, wd in zip(line, widths)))
    steps = {"DP 7B bucket (1/8 per GPU)": 7e9 * 2 / 25e6, "DP 70B/TP8 bucket": 70e9 / 8 * 2 / 25e6}
    print(f"\n# per training step: {steps['DP 7B bucket (1/8 per GPU)']:.0f} buckets (7B), "
          f"{steps['DP 70B/TP8 bucket']:.0f} buckets per GPU (70B, TP8); communication only, "
          "before any overlap with the backward pass")
    for s, w, mib, c, algo, ms, base, src in table:
        if w in steps and c in ("bf16", "nvfp4"):
            print(f"#   {s}, {w}, {c}: {ms * steps[w] / 1e3:.2f} s vs NCCL {base * steps[w] / 1e3:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
