"""Table of training runs written by train_dp.py / train_tp.py --json: each run's final
held-out loss against the exact (--codec none) run of the same kind, and its bytes.

    python examples/compare.py build/examples/*.json
"""
import json
import sys


def main(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(json.load(f))
    exact = {r["mode"]: r for r in runs if r["codec"] == "none"}
    print("| run | codec | error feedback | steps | final held-out loss | vs exact | "
          "MiB sent/step (rank 0) | bytes vs exact | replicas identical | time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(runs, key=lambda r: (r["mode"], r["codec"] != "none", r["codec"])):
        base = exact.get(r["mode"])
        if base:
            delta = f"{100 * (r['val_loss'] / base['val_loss'] - 1):+.2f}%"
            ratio = f"{base['comm_bytes_per_step'] / max(r['comm_bytes_per_step'], 1):.2f}x less"
        else:
            delta = ratio = "(no exact run)"
        if r["codec"] == "none":
            delta, ratio = "—", "—"
        ef = "—" if r["codec"] == "none" else {True: "on", False: "off"}.get(r.get("error_feedback"), "n/a")
        print(f"| {r['mode']}, {r['ranks']} ranks | `{r['codec']}` | {ef} | {r['args']['steps']} | "
              f"{r['val_loss']:.4f} | {delta} | {r['comm_bytes_per_step'] / 2**20:.3f} | {ratio} | "
              f"{'yes' if r['replicas_identical'] else 'NO'} | {r['seconds']:.0f} s |")


if __name__ == "__main__":
    main(sys.argv[1:])
