#!/usr/bin/env python3
"""The last evaluation of each run and their mean and spread: a recipe's figure over seeds.

    python3 scripts/eval_summary.py RUN.metrics.jsonl [RUN ...] [--json OUT]

Per run, from the last 'eval' and 'eval_ema' lines of its metrics.jsonl: top-1, top-1 with the mirror
(train.eval_hflip) and the EMA's; then the mean, the smallest and the largest over the runs of each figure that
every run reported, and the sample standard deviation where there are two runs or more.
"""
import argparse
import json
import statistics
import sys

from metrics_jsonl import records

FIGURES = (("eval", "top1"), ("eval", "top1_hflip"), ("eval_ema", "top1"), ("eval_ema", "top1_hflip"))


def last_evals(path):
    last = {}
    for rec in records(path, "eval_summary"):
        if rec.get("kind") in ("eval", "eval_ema"):
            last[rec["kind"]] = rec
    if "eval" not in last:
        sys.exit(f"eval_summary: {path}: no evaluation (a line with kind 'eval')")
    out = {"epoch": last["eval"].get("epoch"), "step": last["eval"].get("step")}
    for kind, key in FIGURES:
        if key in last.get(kind, {}):
            out[f"{kind}.{key}"] = float(last[kind][key])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--json", help="also write the summary here")
    args = ap.parse_args()
    runs = {p: last_evals(p) for p in args.runs}
    for p, r in runs.items():
        figs = ", ".join(f"{k} {v:.2f}" for k, v in r.items() if "." in k)
        print(f"{p} (epoch {r['epoch']}, step {r['step']}): {figs}")
    summary = {}
    for kind, key in FIGURES:
        name = f"{kind}.{key}"
        values = [r[name] for r in runs.values() if name in r]
        if len(values) != len(runs):
            continue
        summary[name] = {"mean": statistics.mean(values), "min": min(values), "max": max(values),
                         "stdev": statistics.stdev(values) if len(values) > 1 else None}
        s = summary[name]
        sd = "" if s["stdev"] is None else f", sd {s['stdev']:.2f}"
        print(f"{name}: mean {s['mean']:.2f} (min {s['min']:.2f}, max {s['max']:.2f}{sd}) over {len(values)} runs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
