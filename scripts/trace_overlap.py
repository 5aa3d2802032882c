#!/usr/bin/env python3
"""How much of the gradient all-reduce is hidden behind compute, from a `trainer --profile` Chrome trace of a
data-parallel run: the GPU time of NCCL kernels, and the part of it during which a compute kernel was also
running on the device (the union of non-NCCL kernels). Prints one line per figure.

usage: trace_overlap.py trace.json
"""
import json
import sys


def merge(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def main():
    events = json.load(open(sys.argv[1]))["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    nccl = [(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" in e["name"].lower()]
    compute = merge([(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" not in e["name"].lower()])
    if not nccl:
        print("no NCCL kernels in the trace (a single process?)")
        return
    total = sum(b - a for a, b in nccl)
    hidden = 0.0
    for a, b in nccl:
        for c, d in compute:
            if d <= a:
                continue
            if c >= b:
                break
            hidden += min(b, d) - max(a, c)
    steps = [e for e in events if e.get("ph") == "X" and e.get("name") == "backward"]
    busy = sum(b - a for a, b in compute)
    print(f"NCCL kernels: {len(nccl)}, {total / 1e3:.2f} ms of GPU time; {hidden / 1e3:.2f} ms "
          f"({100 * hidden / total:.1f}%) ran while compute kernels ran")
    print(f"compute kernels busy {busy / 1e3:.2f} ms; backward ranges in the trace: {len(steps)}")


if __name__ == "__main__":
    main()
