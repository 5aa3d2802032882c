#!/usr/bin/env python3
"""Idle time on the training stream of a `trainer --profile` Chrome trace, and why: for each gap between two
consecutive kernels of the stream, whether the host launched the next kernel late (host-bound: its
cudaLaunchKernel call ended after the gap began) or the kernel was queued in time and waited on the device
(device-bound: an event wait, or other streams' work), with the other streams' kernels and copies that ran
during the gap. For a host-bound gap it also names the CUDA API calls other host threads were in while the
launch was late (a long call there, e.g. an allocation that synchronises the device, can hold the driver's
locks). Totals per kind of overlap come with it. The training stream is the one with the most kernel time unless --stream names it.

usage: trace_gaps.py trace.json [--stream N] [--min-gap-us 2] [--top 10] [--json OUT]
"""
import argparse
import collections
import json


def load(path):
    return json.load(open(path))["traceEvents"]


def kernel_time_per_stream(kernels):
    """Kernel time (us) per stream; its most_common(1) is the training stream."""
    per_stream = collections.Counter()
    for e in kernels:
        per_stream[e.get("args", {}).get("stream")] += e["dur"]
    return per_stream


def analyse(events, stream=None, min_gap_us=2.0, top=10):
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    kernels = [e for e in gpu if e["cat"] == "kernel"]
    if not kernels:
        raise SystemExit("no GPU kernels in the trace (a CPU run, or the profiler saw no device)")
    per_stream = kernel_time_per_stream(kernels)
    if stream is None:
        stream = per_stream.most_common(1)[0][0]
    mine = sorted((e for e in kernels if e.get("args", {}).get("stream") == stream), key=lambda e: e["ts"])
    if len(mine) < 2:
        raise SystemExit(f"stream {stream} has {len(mine)} kernel(s): nothing to measure")
    others = sorted((e for e in gpu if e.get("args", {}).get("stream") != stream), key=lambda e: e["ts"])
    launches = {}
    api = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            api.append(e)
            c = e.get("args", {}).get("correlation")
            if c is not None:
                launches[c] = e
    api.sort(key=lambda e: e["ts"])
    device_overlap_total = collections.Counter()
    host_overlap_total = collections.Counter()
    window = (mine[0]["ts"], mine[-1]["ts"] + mine[-1]["dur"])
    busy = sum(e["dur"] for e in mine)
    gaps = []
    for prev, nxt in zip(mine, mine[1:]):
        start, end = prev["ts"] + prev["dur"], nxt["ts"]
        if end - start < min_gap_us:
            continue
        launch = launches.get(nxt.get("args", {}).get("correlation"))
        launched_at = launch["ts"] + launch["dur"] if launch else None
        host_bound = launched_at is not None and launched_at > start + 1.0
        overlap = collections.Counter()
        for o in others:
            if o["ts"] >= end:
                break
            a, b = max(start, o["ts"]), min(end, o["ts"] + o["dur"])
            if b > a:
                overlap[o["cat"] if o["cat"] != "kernel" else o["name"][:60]] += b - a
        calls = collections.Counter()
        if host_bound:  # what the other threads were calling while this launch was late
            for c in api:
                if c["ts"] >= launched_at:
                    break
                if c.get("tid") == launch.get("tid"):
                    continue
                a, b = max(start, c["ts"]), min(launched_at, c["ts"] + c["dur"])
                if b > a:
                    calls[c["name"][:60]] += b - a
            host_overlap_total.update(calls)
        else:
            device_overlap_total.update(overlap)
        gaps.append({"start_us": start, "gap_us": end - start, "host_bound": host_bound,
                     "next_kernel": nxt["name"][:80], "launch_call": launch["name"] if launch else None,
                     "launched_late_by_us": (launched_at - start) if host_bound else 0.0,
                     "launch_call_us": launch["dur"] if launch else None,
                     "other_streams_during_gap_us": dict(overlap.most_common(3)),
                     "other_threads_api_calls_us": dict(calls.most_common(3))})
    idle = sum(g["gap_us"] for g in gaps)
    host = sum(g["gap_us"] for g in gaps if g["host_bound"])
    buckets = collections.Counter()
    for g in gaps:
        b = "<10us" if g["gap_us"] < 10 else "10-100us" if g["gap_us"] < 100 else "0.1-1ms" if g["gap_us"] < 1000 else ">=1ms"
        buckets[b] += g["gap_us"]
    return {"stream": stream, "window_us": window[1] - window[0], "kernel_busy_us": busy, "kernels": len(mine),
            "idle_us": idle, "idle_host_bound_us": host, "idle_device_bound_us": idle - host,
            "gaps": len(gaps), "idle_by_gap_size_us": dict(buckets),
            "kernel_us_per_stream": {str(k): v for k, v in per_stream.most_common()},
            "device_bound_gaps_other_streams_us": dict(device_overlap_total.most_common(8)),
            "host_bound_gaps_other_threads_api_us": dict(host_overlap_total.most_common(8)),
            "largest_gaps": sorted(gaps, key=lambda g: -g["gap_us"])[:top]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--stream", type=int)
    ap.add_argument("--min-gap-us", type=float, default=2.0)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()
    r = analyse(load(a.trace), a.stream, a.min_gap_us, a.top)
    print(f"stream {r['stream']}: {r['kernels']} kernels, window {r['window_us'] / 1e3:.2f} ms, kernels "
          f"{r['kernel_busy_us'] / 1e3:.2f} ms, idle {r['idle_us'] / 1e3:.2f} ms in {r['gaps']} gaps "
          f"(host-bound {r['idle_host_bound_us'] / 1e3:.2f} ms, device-bound {r['idle_device_bound_us'] / 1e3:.2f} ms)")
    print("idle by gap size (ms): " + ", ".join(f"{k} {v / 1e3:.2f}" for k, v in sorted(r["idle_by_gap_size_us"].items())))
    def listing(d):
        return "; ".join(f"{k} {v:.0f} us" for k, v in d.items()) or "nothing"
    print("during device-bound gaps, other streams ran: " + listing(r["device_bound_gaps_other_streams_us"]))
    print("during host-bound gaps, other threads were in: " + listing(r["host_bound_gaps_other_threads_api_us"]))
    for g in r["largest_gaps"]:
        if g["host_bound"]:
            why = (f"host launched it {g['launched_late_by_us']:.0f} us late, {g['launch_call']} took "
                   f"{g['launch_call_us']:.0f} us; other threads: {listing(g['other_threads_api_calls_us'])}")
        else:
            why = "queued in time"
        print(f"  {g['gap_us']:8.0f} us before {g['next_kernel']} ({why}); other streams: "
              f"{listing(g['other_streams_during_gap_us'])}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
