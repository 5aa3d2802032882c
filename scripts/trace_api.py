#!/usr/bin/env python3
"""CUDA API calls per host thread in a `trainer --profile` Chrome trace: for each thread, each call's count, total
and longest time, and the longest single calls of the threads other than the training ones (those that launched a
tenth or more of the training stream's kernels: the step launches from the main thread and autograd's). A call
that waits for the device (an event or stream sync, an allocation or free that synchronises it) shows up as a few
long calls; a thread that is busy launching as many short ones.

usage: trace_api.py trace.json [--top 15] [--json OUT]
"""
import argparse
import collections
import json

from trace_gaps import kernel_time_per_stream, load


def analyse(events, top=15):
    api = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")]
    if not api:
        raise SystemExit("no CUDA API calls in the trace (a CPU run, or the profiler saw no device)")
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    per_stream = kernel_time_per_stream(kernels)
    training_stream = per_stream.most_common(1)[0][0] if per_stream else None
    launcher = {e.get("args", {}).get("correlation"): e.get("tid") for e in api}
    by_tid = collections.Counter()
    for k in kernels:
        if k.get("args", {}).get("stream") == training_stream:
            by_tid[launcher.get(k.get("args", {}).get("correlation"))] += 1
    training_tid = by_tid.most_common(1)[0][0] if by_tid else None
    launched = sum(by_tid.values())
    training = sorted(t for t, n in by_tid.items() if t is not None and 10 * n >= launched)
    start = min(e["ts"] for e in api)
    end = max(e["ts"] + e["dur"] for e in api)
    threads = {}
    for e in api:
        t = threads.setdefault(e["tid"], collections.defaultdict(lambda: [0, 0.0, 0.0]))
        c = t[e["name"]]
        c[0] += 1
        c[1] += e["dur"]
        c[2] = max(c[2], e["dur"])
    longest = sorted((e for e in api if e["tid"] not in training), key=lambda e: -e["dur"])[:top]
    return {
        "window_ms": (end - start) / 1e3,
        "training_thread": training_tid,
        "training_threads": training,
        "training_stream": training_stream,
        "threads": {str(tid): {name: {"calls": c[0], "total_ms": c[1] / 1e3, "longest_us": c[2]}
                               for name, c in sorted(calls.items(), key=lambda kv: -kv[1][1])}
                    for tid, calls in threads.items()},
        "longest_other_calls": [{"name": e["name"], "tid": e["tid"], "at_ms": (e["ts"] - start) / 1e3,
                                 "us": e["dur"]} for e in longest],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json")
    a = ap.parse_args()
    r = analyse(load(a.trace), a.top)
    print(f"window {r['window_ms']:.1f} ms; training threads {', '.join(map(str, r['training_threads']))} "
          f"(stream {r['training_stream']})")
    for tid, calls in sorted(r["threads"].items(), key=lambda kv: -sum(c["total_ms"] for c in kv[1].values())):
        total = sum(c["total_ms"] for c in calls.values())
        mark = " (training)" if tid in {str(t) for t in r["training_threads"]} else ""
        print(f"thread {tid}{mark}: {total:.1f} ms in CUDA calls")
        for name, c in list(calls.items())[:8]:
            print(f"    {name[:40]:40s} x{c['calls']:<6d} {c['total_ms']:8.2f} ms, longest {c['longest_us']:8.0f} us")
    print("longest calls of the other threads:")
    for c in r["longest_other_calls"]:
        print(f"    {c['us']:8.0f} us  {c['name'][:40]:40s} thread {c['tid']} at {c['at_ms']:.1f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
