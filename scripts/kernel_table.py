#!/usr/bin/env python3
"""Top GPU kernels of Chrome traces side by side (trainer's --profile trace.json and a torch.profiler export of the
same steps): total ms per kernel name over the traced steps, per trace, largest first. For diffing where a step's
GPU time goes between trainer and PyTorch.

usage: kernel_table.py A.json B.json [--top 25] [--by-stream]
(--by-stream: also the kernel ms per CUDA stream of each trace, e.g. training's against a loader's side stream.)
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


def streams(path):
    t = collections.Counter()
    for e in json.load(open(path))["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            t[e.get("args", {}).get("stream", e.get("tid"))] += e["dur"]
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--by-stream", action="store_true")
    a = ap.parse_args()
    (ta, na), (tb, nb) = kernels(a.a), kernels(a.b)
    print(f"total GPU kernel ms: A {sum(ta.values()) / 1e3:.2f} ({sum(na.values())} kernels), "
          f"B {sum(tb.values()) / 1e3:.2f} ({sum(nb.values())} kernels)")
    names = sorted(set(ta) | set(tb), key=lambda k: -max(ta[k], tb[k]))[: a.top]
    for k in names:
        print(f"{ta[k] / 1e3:8.2f} ms x{na[k]:<5d} {tb[k] / 1e3:8.2f} ms x{nb[k]:<5d} {k}")
    if a.by_stream:
        for label, path in (("A", a.a), ("B", a.b)):
            per = streams(path)
            print(f"{label} kernel ms per stream: " +
                  ", ".join(f"{s}: {v / 1e3:.2f}" for s, v in sorted(per.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
