#!/usr/bin/env python3
"""Does cuDNN's runtime fusion pay for ResNet-50's batch norm (issue 24, item 5)? One GPU call answers "right?" and
"fast?" for every bottleneck convolution whose input is a batch norm + ReLU of the previous convolution's output
(bn1 -> conv2, bn2 -> conv3), at batch 256, channels_last, in bf16 and in fp16 (--io), through cuDNN's graph API
(cudnn-frontend's Python bindings):

  forward  relu(x * scale + bias) -> conv_fprop -> y, and genstats(y): the per-channel sum and sum of squares that
           y's own batch norm needs (MLPerf's design: the norm's apply in the next convolution's prologue, its
           statistics in the epilogue), against the plain convolution of a stored z = relu(x * scale + bias);
  backward relu(x * scale + bias) -> conv_wgrad: the weight gradient recomputing z in its prologue (no z kept),
           against the plain weight gradient of the stored z.

Each graph is checked against the same computation in fp32 (torch, on the GPU) and timed with CUDA events. What
the fused forward saves is trainer's apply pass on x (read x, write z) and statistics pass on y (read y): those are
not run here, their time is estimated from their bytes at BW_TBS (our NHWC kernels' rate on large shapes). The
table gives, per shape and per training step (shapes weighted by how often ResNet-50 has them), the fused graph's
time against the convolution plus that estimate.

usage (on the GPU host, the wheel from scripts/offline/fetch-debs.sh unpacked onto PYTHONPATH):
  python3 scripts/probes/conv_bn_fusion.py [--batch 256] [--reps 20] [--only s1.conv2,...] [--json OUT]
(runtime-fusion graphs are compiled when built: expect seconds per graph)
"""
import argparse
import json
import math
import sys
import time

import torch

BW_TBS = 3.8  # trainer's batch-norm kernels on ResNet-50's large layers (3.4-4.2 TB/s, bench/NOTES.md)

# (name, in channels, in side, out channels, kernel, stride, times per ResNet-50 step); timm's resnet50 strides
# its 3x3 convolutions
SHAPES = [
    ("s1.conv2", 64, 56, 64, 3, 1, 3),
    ("s1.conv3", 64, 56, 256, 1, 1, 3),
    ("s2.b1.conv2", 128, 56, 128, 3, 2, 1),
    ("s2.conv2", 128, 28, 128, 3, 1, 3),
    ("s2.conv3", 128, 28, 512, 1, 1, 4),
    ("s3.b1.conv2", 256, 28, 256, 3, 2, 1),
    ("s3.conv2", 256, 14, 256, 3, 1, 5),
    ("s3.conv3", 256, 14, 1024, 1, 1, 6),
    ("s4.b1.conv2", 512, 14, 512, 3, 2, 1),
    ("s4.conv2", 512, 7, 512, 3, 1, 2),
    ("s4.conv3", 512, 7, 2048, 1, 1, 3),
]


def timed(fn, reps):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def rel_err(a, ref):
    return ((a.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


class Fused:
    """One cuDNN graph: relu(x * scale + bias) into a convolution (fprop with genstats, or wgrad); kind "stats":
    the convolution of x itself with genstats, no prologue."""

    def __init__(self, cudnn, handle, kind, x, scale, bias, w, dy, pad, stride):
        self.cudnn, self.handle = cudnn, handle
        io = cudnn.data_type.HALF if x.dtype == torch.float16 else cudnn.data_type.BFLOAT16
        g = cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)

        def t(name, v):
            return g.tensor(name=name, dim=list(v.size()), stride=list(v.stride()), data_type=v.dtype)

        self.X = t("X", x)
        z = self.X
        if kind != "stats":
            self.S, self.B = t("S", scale), t("B", bias)
            z = g.relu(name="relu", input=g.bias(name="bias", input=g.scale(name="scale", input=self.X,
                                                                            scale=self.S), bias=self.B))
        conv = dict(padding=[pad, pad], stride=[stride, stride], dilation=[1, 1])
        if kind in ("fprop", "stats"):
            self.W = t("W", w)
            self.Y = g.conv_fprop(name="conv", image=z, weight=self.W, **conv)
            self.Y.set_output(True).set_data_type(io)
            self.SUM, self.SQ = g.genstats(name="genstats", input=self.Y)
            self.SUM.set_output(True).set_data_type(cudnn.data_type.FLOAT)
            self.SQ.set_output(True).set_data_type(cudnn.data_type.FLOAT)
        else:
            self.DY = t("DY", dy)
            self.DW = g.conv_wgrad(name="wgrad", image=z, loss=self.DY, **conv)
            self.DW.set_output(True).set_dim(list(w.size())).set_stride(list(w.stride())).set_data_type(io)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        self.graph = g
        self.workspace = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)

    def run(self, pack):
        self.graph.execute(pack, self.workspace, handle=self.handle)


def probe_shape(cudnn, handle, shape, batch, reps, io):
    name, c, side, k, r, stride, count = shape
    pad = r // 2
    cl = torch.channels_last
    x = torch.randn(batch, c, side, side, device="cuda").to(io).contiguous(memory_format=cl)
    scale = (torch.rand(1, c, 1, 1, device="cuda") + 0.5).contiguous(memory_format=cl)
    bias = (torch.randn(1, c, 1, 1, device="cuda") * 0.5).contiguous(memory_format=cl)
    w = (torch.randn(k, c, r, r, device="cuda") / math.sqrt(c * r * r)).to(io).contiguous(memory_format=cl)
    out_side = (side + 2 * pad - r) // stride + 1
    dy = torch.randn(batch, k, out_side, out_side, device="cuda").to(io).contiguous(memory_format=cl)
    row = {"shape": name, "io": str(io).replace("torch.", ""), "count": count, "n": batch, "c": c, "hw": side,
           "k": k, "r": r, "stride": stride}

    # fp32 references, and today's path: z stored in the I/O type, the plain convolution and weight gradient
    z32 = torch.relu(x.float() * scale + bias)
    y_ref = torch.nn.functional.conv2d(z32, w.float(), stride=stride, padding=pad)
    sum_ref, sq_ref = y_ref.sum(dim=(0, 2, 3)), (y_ref * y_ref).sum(dim=(0, 2, 3))
    dw_ref = torch.ops.aten.convolution_backward(dy.float(), z32, w.float(), None, [stride] * 2, [pad] * 2, [1, 1],
                                                 False, [0, 0], 1, [False, True, False])[1]
    z = z32.to(io).contiguous(memory_format=cl)
    del z32
    row["conv_ms"] = timed(lambda: torch.nn.functional.conv2d(z, w, stride=stride, padding=pad), reps)
    row["wgrad_ms"] = timed(lambda: torch.ops.aten.convolution_backward(
        dy, z, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, [False, True, False]), reps)
    # trainer's passes the fused forward makes unneeded: apply on x (read, write), statistics of y (read)
    saved_bytes = 2 * 2 * x.numel() + 2 * dy.numel()
    row["ours_est_ms"] = saved_bytes / (BW_TBS * 1e12) * 1e3

    # scale and bias in fp32 (trainer's batch-norm parameters and statistics are fp32); where cuDNN takes no such
    # graph, in the I/O type (its samples do that)
    f, errors = None, []
    for dtype in (torch.float32, io):
        try:
            f = Fused(cudnn, handle, "fprop", x, scale.to(dtype), bias.to(dtype), w, dy, pad, stride)
            row["scale_dtype"] = str(dtype)
            scale, bias = scale.to(dtype), bias.to(dtype)
            break
        except Exception as e:  # cudnnGraphNotSupportedError and kin: the answer for this shape and type
            errors.append(f"{dtype}: {type(e).__name__}: {e}"[:300])
    if f is None:
        row["fprop_error"] = " | ".join(errors)
    try:
        if f is None:
            raise RuntimeError("no fprop graph")
        y = torch.empty_like(dy)
        s = torch.empty(1, k, 1, 1, device="cuda")
        q = torch.empty(1, k, 1, 1, device="cuda")
        pack = {f.X: x, f.S: scale, f.B: bias, f.W: w, f.Y: y, f.SUM: s, f.SQ: q}
        f.run(pack)
        torch.cuda.synchronize()
        row["fprop_y_rel_err"] = rel_err(y, y_ref)
        row["fprop_io_rel_err"] = rel_err(torch.nn.functional.conv2d(z, w, stride=stride, padding=pad), y_ref)
        row["sum_rel_err"] = ((s.view(-1) - sum_ref).abs().max() / y_ref.abs().sum(dim=(0, 2, 3)).max()).item()
        row["sq_rel_err"] = ((q.view(-1) - sq_ref).abs().max() / sq_ref.abs().max()).item()
        row["fused_fprop_ms"] = timed(lambda: f.run(pack), reps)
        del f
    except Exception as e:
        row.setdefault("fprop_error", f"{type(e).__name__}: {e}"[:400])
    try:  # the statistics alone in the convolution's epilogue (of the stored z): saves the statistics pass's read
        f = Fused(cudnn, handle, "stats", z, None, None, w, dy, pad, stride)
        y = torch.empty_like(dy)
        s = torch.empty(1, k, 1, 1, device="cuda")
        q = torch.empty(1, k, 1, 1, device="cuda")
        pack = {f.X: z, f.W: w, f.Y: y, f.SUM: s, f.SQ: q}
        f.run(pack)
        torch.cuda.synchronize()
        row["stats_sum_rel_err"] = ((s.view(-1) - sum_ref).abs().max() / y_ref.abs().sum(dim=(0, 2, 3)).max()).item()
        row["fused_stats_ms"] = timed(lambda: f.run(pack), reps)
        row["stats_est_ms"] = 2 * dy.numel() / (BW_TBS * 1e12) * 1e3
        del f
    except Exception as e:
        row["stats_error"] = f"{type(e).__name__}: {e}"[:400]
    try:
        f = Fused(cudnn, handle, "wgrad", x, scale, bias, w, dy, pad, stride)
        dw = torch.empty_like(w)
        pack = {f.X: x, f.S: scale, f.B: bias, f.DY: dy, f.DW: dw}
        f.run(pack)
        torch.cuda.synchronize()
        row["wgrad_rel_err"] = rel_err(dw, dw_ref)
        row["fused_wgrad_ms"] = timed(lambda: f.run(pack), reps)
        del f
    except Exception as e:
        row["wgrad_error"] = f"{type(e).__name__}: {e}"[:400]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument("--only", default="", help="comma-separated shape names (default: all)")
    ap.add_argument("--io", default="bf16,fp16", help="activation and weight types, comma-separated")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    import cudnn

    torch.backends.cudnn.benchmark = True
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    rows = []
    t0 = time.time()
    types = {"bf16": torch.bfloat16, "fp16": torch.float16}
    for io in args.io.split(","):
        for shape in SHAPES:
            if not only or shape[0] in only:
                rows.append(probe_shape(cudnn, handle, shape, args.batch, args.reps, types[io]))
                torch.cuda.empty_cache()
    head = (f"{'shape':12} {'io':8} {'x':>3} {'conv':>7} {'ours':>6} {'fused':>7} {'gain':>7} {'wgrad':>7} "
            f"{'fusedw':>7} "
            f"{'y err':>8} {'(io)':>8} {'sum err':>8} {'dw err':>8}")
    print(head)
    steps = {}
    for r in rows:
        step = steps.setdefault(r["io"], {"today_ms": 0.0, "fused_ms": 0.0, "wgrad_today_ms": 0.0,
                                          "wgrad_fused_ms": 0.0})
        fused, fw = r.get("fused_fprop_ms", float("nan")), r.get("fused_wgrad_ms", float("nan"))
        gain = r["conv_ms"] + r["ours_est_ms"] - fused
        print(f"{r['shape']:12} {r['io']:8} {r['count']:>3} {r['conv_ms']:7.3f} {r['ours_est_ms']:6.3f} {fused:7.3f} "
              f"{gain:7.3f} "
              f"{r['wgrad_ms']:7.3f} {fw:7.3f} {r.get('fprop_y_rel_err', float('nan')):8.1e} "
              f"{r.get('fprop_io_rel_err', float('nan')):8.1e} {r.get('sum_rel_err', float('nan')):8.1e} "
              f"{r.get('wgrad_rel_err', float('nan')):8.1e}")
        if "fused_stats_ms" in r:
            print(f"  statistics in the epilogue alone: {r['fused_stats_ms']:.3f} ms against the convolution + "
                  f"statistics pass {r['conv_ms'] + r['stats_est_ms']:.3f} (sum err {r['stats_sum_rel_err']:.1e})")
        for key in ("fprop_error", "wgrad_error", "stats_error"):
            if key in r:
                print(f"  {key}: {' '.join(r[key].split())[:240]}")
        step["today_ms"] += r["count"] * (r["conv_ms"] + r["ours_est_ms"])
        step["fused_ms"] += r["count"] * fused
        step["wgrad_today_ms"] += r["count"] * r["wgrad_ms"]
        step["wgrad_fused_ms"] += r["count"] * fw
    for io, step in steps.items():
        print(f"per ResNet-50 step, {io}: forward today {step['today_ms']:.2f} ms (convolutions + our passes' "
              f"estimate), fused {step['fused_ms']:.2f}; weight gradients today {step['wgrad_today_ms']:.2f}, "
              f"fused {step['wgrad_fused_ms']:.2f}")
    print(f"({time.time() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tool": "conv_bn_fusion", "cudnn": cudnn.backend_version_string(), "bw_tbs": BW_TBS,
                       "gpu": torch.cuda.get_device_name(), "rows": rows, "steps": steps}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
