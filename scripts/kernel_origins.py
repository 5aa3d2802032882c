#!/usr/bin/env python3
"""Which CPU ops launched a trace's kernels: for the kernels whose name matches PATTERN in a Chrome trace (trainer's
--profile trace.json or a torch.profiler export), their GPU ms summed per launching op stack (the CPU ops enclosing
the launch on its thread, innermost last), largest first. For finding where a kernel of unknown origin comes from.

usage: kernel_origins.py TRACE.json PATTERN [--depth 4] [--top 10]
"""
import argparse
import collections
import json
import re


def launches(events):
    """correlation id -> (thread, time) of the runtime call that launched it"""
    out = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            c = e.get("args", {}).get("correlation")
            if c is not None:
                out[c] = (e["tid"], e["ts"])
    return out


def stacks_at(events, points):
    """(thread, time) -> the names of the CPU ops enclosing that time on that thread, outermost first"""
    ops = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "python_function"):
            ops[e["tid"]].append((e["ts"], e["ts"] + e.get("dur", 0), e["name"]))
    out = {}
    by_tid = collections.defaultdict(list)
    for p in points:
        by_tid[p[0]].append(p[1])
    for tid, times in by_tid.items():
        spans = sorted(ops.get(tid, []), key=lambda s: (s[0], -s[1]))
        stack, i = [], 0
        for t in sorted(set(times)):
            while i < len(spans) and spans[i][0] <= t:
                while stack and stack[-1][1] < spans[i][0]:
                    stack.pop()
                stack.append(spans[i])
                i += 1
            while stack and stack[-1][1] < t:
                stack.pop()
            out[(tid, t)] = [s[2] for s in stack if s[0] <= t <= s[1]]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("pattern")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    events = json.load(open(a.trace))["traceEvents"]
    pat = re.compile(a.pattern)
    kern = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel" and pat.search(e["name"])]
    launch = launches(events)
    points = {launch[k["args"]["correlation"]] for k in kern if k.get("args", {}).get("correlation") in launch}
    stacks = stacks_at(events, points)
    ms = collections.Counter()
    n = collections.Counter()
    for k in kern:
        p = launch.get(k.get("args", {}).get("correlation"))
        stack = stacks.get(p, []) if p else []
        key = " > ".join(stack[-a.depth:]) or "(no CPU op found)"
        ms[key] += k["dur"] / 1e3
        n[key] += 1
    print(f"{len(kern)} kernels matching {a.pattern!r}: {sum(ms.values()):.3f} ms")
    for key, v in ms.most_common(a.top):
        print(f"{v:8.3f} ms x{n[key]:<4d} {key}")


if __name__ == "__main__":
    main()
