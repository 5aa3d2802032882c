#!/usr/bin/env python3
"""Top GPU kernels of Chrome traces side by side (trainer's --profile trace.json and a torch.profiler export of the
same steps): total ms per kernel name over the traced steps, per trace, largest first. For diffing where a step's
GPU time goes between trainer and PyTorch.

usage: kernel_table.py A.json B.json [--top 25]
"""
import argparse
import collections
import json


def kernels(path):
    ev = json.load(open(path))["traceEvents"]
    t = collections.Counter()
    n = collections.Counter()
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            name = e["name"][:90]
            t[name] += e["dur"]
            n[name] += 1
    return t, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    (ta, na), (tb, nb) = kernels(a.a), kernels(a.b)
    print(f"total GPU kernel ms: A {sum(ta.values()) / 1e3:.2f} ({sum(na.values())} kernels), "
          f"B {sum(tb.values()) / 1e3:.2f} ({sum(nb.values())} kernels)")
    names = sorted(set(ta) | set(tb), key=lambda k: -max(ta[k], tb[k]))[: a.top]
    for k in names:
        print(f"{ta[k] / 1e3:8.2f} ms x{na[k]:<5d} {tb[k] / 1e3:8.2f} ms x{nb[k]:<5d} {k}")


if __name__ == "__main__":
    main()
