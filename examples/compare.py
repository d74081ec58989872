"""Table of training runs written by train_dp.py / train_tp.py --json: each run's final
held-out loss against the exact (--codec none) run of the same kind and seed, and its
bytes. An exact run with another --seed shows how far two exact runs differ.

    .venv/bin/python examples/compare.py build/examples/*.json build/examples/seed/*.json
"""
import json
import sys


BASE_SEED = 1234  # the runs compared; an exact run with another seed shows run-to-run spread


def is_exact(r):
    return r["codec"] == "none" and r.get("grad_codec") in (None, "none")


def main(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(json.load(f))
    exact = {(r["mode"], r["args"]["seed"]): r for r in runs if is_exact(r)}
    print("| run | codec | error feedback | steps | final held-out loss | vs exact | "
          "MiB sent/step (rank 0) | bytes vs exact | replicas identical | time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(runs, key=lambda r: (r["mode"], not is_exact(r), r["args"]["seed"] != BASE_SEED,
                                         r["codec"], r.get("grad_codec") or "")):
        # A compressed run against the exact run of its seed; an exact run with another
        # seed against the exact run with the base seed (how far two exact runs differ).
        seed = r["args"]["seed"]
        base = exact.get((r["mode"], BASE_SEED if is_exact(r) else seed))
        if base:
            delta = f"{100 * (r['val_loss'] / base['val_loss'] - 1):+.2f}%"
            ratio = f"{base['comm_bytes_per_step'] / max(r['comm_bytes_per_step'], 1):.2f}x less"
        else:
            delta = ratio = "(no exact run)"
        if r is base:
            delta, ratio = "—", "—"
        elif is_exact(r):
            ratio = "—"
        ef = {True: "on", False: "off"}.get(r.get("error_feedback"), "—")
        if is_exact(r):
            ef = "—"
        codec = f"`{r['codec']}`"
        if r.get("grad_codec") not in (None, r["codec"]):
            codec += f", gradients `{r['grad_codec']}`"
        seed = "" if seed == BASE_SEED else f" (seed {seed})"
        print(f"| {r['mode']}, {r['ranks']} ranks{seed} | {codec} | {ef} | {r['args']['steps']} | "
              f"{r['val_loss']:.4f} | {delta} | {r['comm_bytes_per_step'] / 2**20:.3f} | {ratio} | "
              f"{'yes' if r['replicas_identical'] else 'NO'} | {r['seconds']:.0f} s |")


if __name__ == "__main__":
    main(sys.argv[1:])
