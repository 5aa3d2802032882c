#!/usr/bin/env python3
"""How far apart training runs' loss curves are: each run's metrics.jsonl against the first one's.

    python3 scripts/compare_runs.py REF.metrics.jsonl RUN.metrics.jsonl [RUN ...] [--json OUT]

For every run after the reference: the mean and the largest |loss difference| over the logged training steps both
runs have, the final losses, and the last evaluation's top-1 where the runs evaluated. A yardstick for "fused
against off": give the reference `off` run first, then `off` with other seeds, then the fused run.
"""
import argparse
import json
import sys

from metrics_jsonl import records


def read_run(path):
    losses, top1 = {}, None
    for rec in records(path, "compare_runs"):
        if rec.get("kind") == "train" and "loss" in rec and "step" in rec:
            losses[int(rec["step"])] = float(rec["loss"])
        elif rec.get("kind") == "eval" and "top1" in rec:
            top1 = float(rec["top1"])
    if not losses:
        sys.exit(f"compare_runs: {path}: no training losses (lines with kind 'train', 'step' and 'loss')")
    return losses, top1


def compare(ref, run):
    steps = sorted(set(ref[0]) & set(run[0]))
    if not steps:
        return None
    diffs = [abs(ref[0][s] - run[0][s]) for s in steps]
    return {"steps": len(steps), "mean_abs_loss_diff": sum(diffs) / len(diffs), "max_abs_loss_diff": max(diffs),
            "final_step": steps[-1], "final_loss_ref": ref[0][steps[-1]], "final_loss": run[0][steps[-1]],
            "top1_ref": ref[1], "top1": run[1]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ref")
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--json", help="also write the comparison here")
    args = ap.parse_args()
    ref = read_run(args.ref)
    out = {"reference": args.ref, "runs": {}}
    print(f"against {args.ref}:")
    for path in args.runs:
        c = compare(ref, read_run(path))
        if c is None:
            sys.exit(f"compare_runs: {path} and {args.ref} log no common step")
        out["runs"][path] = c
        top = "" if c["top1"] is None else f", top-1 {c['top1']:.2f} (ref {c['top1_ref']:.2f})"
        print(f"  {path}: |loss diff| mean {c['mean_abs_loss_diff']:.4f}, max {c['max_abs_loss_diff']:.4f} over "
              f"{c['steps']} steps; final loss {c['final_loss']:.4f} (ref {c['final_loss_ref']:.4f}){top}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
