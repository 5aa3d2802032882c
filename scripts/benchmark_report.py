#!/usr/bin/env python3
"""Turns a benchmark suite's OUTDIR/raw/*.json (scripts/benchmark.sh) into OUTDIR/results.json (every record with
the host and environment), OUTDIR/report.md (one table: workload, trainer, PyTorch eager, torch.compile, ratios)
and OUTDIR/report.png (the same as bars; with the full suite also the thread and batch-size curves). Repeats
(names ending _2, _3) are folded into their median.

usage: benchmark_report.py OUTDIR
"""
import glob
import json
import os
import re
import statistics
import sys
import time

from PIL import Image, ImageDraw, ImageFont


def load(out):
    raw = {}
    for p in sorted(glob.glob(os.path.join(out, "raw", "*.json"))):
        with open(p) as f:
            raw[os.path.basename(p)[:-5]] = json.load(f)
    return raw


def median_of(raw, name, key="img_per_s"):
    """The median of `key` over name, name_2, name_3 (those present); None when none is."""
    vals = [raw[n][key] for n in (name, name + "_2", name + "_3") if n in raw and key in raw[n]]
    return statistics.median(vals) if vals else None


def ratio(a, b):
    return a / b if a and b else None


def training_rows(raw):
    rows = []
    for name in raw:
        m = re.fullmatch(r"train_(.+)_(bf16|fp16|fp32)_bs(\d+)_trainer", name)
        if not m:
            continue
        model, prec, bs = m.group(1), m.group(2), int(m.group(3))
        base = f"train_{model}_{prec}_bs{bs}"
        ours, eager, comp = (median_of(raw, f"{base}_{t}") for t in ("trainer", "eager", "compile"))
        rec = raw[name]
        rows.append({"workload": f"{model} {prec} bs {bs}, training step (synthetic)", "kind": "train",
                     "model": model, "precision": prec, "batch_size": bs, "trainer": ours, "pytorch_eager": eager,
                     "torch_compile": comp, "vs_eager": ratio(ours, eager), "vs_compile": ratio(ours, comp),
                     "peak_mem_gib": rec.get("peak_mem_gib"), "fused_norm": rec.get("fused_norm")})
    rows.sort(key=lambda r: (r["batch_size"] != 256, r["model"], r["precision"], r["batch_size"]))
    return rows


def pipeline_rows(raw):
    rows = []
    dl = raw.get("pipeline_torch_dataloader", {}).get("img_per_s")
    for key, what in (("pipeline_cpu", "CPU decode"), ("pipeline_gpu", "GPU decode (nvJPEG)")):
        if key in raw:
            v = raw[key]["img_per_s"]
            rows.append({"workload": f"input pipeline alone, JPEG folder, {what}", "kind": "pipeline", "trainer": v,
                         "torch_dataloader": dl, "vs_dataloader": ratio(v, dl)})
    for name in sorted(raw):
        m = re.fullmatch(r"e2e_(.+)_(bf16|fp16)_trainer", name)
        if not m:
            continue
        synth = median_of(raw, f"train_{m.group(1)}_{m.group(2)}_bs256_trainer")
        v = raw[name]["img_per_s"]
        rows.append({"workload": f"{m.group(1)} {m.group(2)} end to end from JPEGs (default decode)", "kind": "e2e",
                     "trainer": v, "synthetic": synth, "of_synthetic": ratio(v, synth)})
    return rows


def curves(raw):
    threads = sorted((int(n.rsplit("_", 1)[1]), r["img_per_s"]) for n, r in raw.items() if n.startswith("threads_cpu_"))
    batch = []
    for n, r in raw.items():
        m = re.fullmatch(r"train_resnet50_bf16_bs(\d+)_trainer", n)
        if m:
            bs = int(m.group(1))
            eager = raw.get(f"train_resnet50_bf16_bs{bs}_eager", {})
            batch.append((bs, r["img_per_s"], r.get("peak_mem_gib"), eager.get("img_per_s"), eager.get("peak_mem_gib")))
    return {"pipeline_threads": threads, "resnet50_bf16_batch": sorted(batch)}


def fmt(v, spec=",.0f"):
    return "" if v is None else format(v, spec)


def times(v):
    return "" if v is None else f"{v:.2f}x"


def markdown(meta, train, pipe, cur):
    lines = [f"# Benchmark suite ({meta['mode']}), {meta['date']}", "",
             f"Host: {meta['gpu']}; trainer {meta['trainer']} at {meta['commit']}; {meta['env']}.", "",
             "| workload | trainer img/s | PyTorch eager | torch.compile | vs eager | vs compile | trainer peak GiB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in train:
        lines.append(f"| {r['workload']} | {fmt(r['trainer'])} | {fmt(r['pytorch_eager'])} | {fmt(r['torch_compile'])} "
                     f"| {times(r['vs_eager'])} | {times(r['vs_compile'])} | {fmt(r['peak_mem_gib'], '.1f')} |")
    if pipe:
        lines += ["", "| input side | trainer img/s | reference | ratio |", "| --- | ---: | --- | ---: |"]
        for r in pipe:
            if r["kind"] == "pipeline":
                lines.append(f"| {r['workload']} | {fmt(r['trainer'])} | torch DataLoader, 16 workers: "
                             f"{fmt(r['torch_dataloader'])} | {times(r['vs_dataloader'])} |")
            else:
                lines.append(f"| {r['workload']} | {fmt(r['trainer'])} | synthetic: {fmt(r['synthetic'])} "
                             f"| {fmt(100 * r['of_synthetic'] if r['of_synthetic'] else None, '.1f')}% |")
    if cur["pipeline_threads"]:
        lines += ["", "CPU pipeline against decode threads: " +
                  ", ".join(f"{n}: {v:,.0f}" for n, v in cur["pipeline_threads"]) + " img/s"]
    if len(cur["resnet50_bf16_batch"]) > 1:
        lines += ["", "ResNet-50 bf16 against batch size (trainer img/s, peak GiB / eager img/s, peak GiB): " +
                  "; ".join(f"{b}: {fmt(t)}, {fmt(m, '.1f')} / {fmt(e)}, {fmt(em, '.1f')}"
                            for b, t, m, e, em in cur["resnet50_bf16_batch"])]
    lines += ["", "Training steps: 20 warm-up + timed steps, SGD, channels_last for ResNets; PyTorch runs timm's models "
              "(scripts/bench_pytorch.py). Raw records: raw/*.json; every figure with its environment: results.json."]
    return "\n".join(lines) + "\n"


COLORS = {"trainer": (31, 119, 180), "pytorch_eager": (255, 127, 14), "torch_compile": (44, 160, 44),
          "torch_dataloader": (255, 127, 14), "synthetic": (148, 103, 189)}


def bars(draw, font, x0, y0, w, groups, title):
    """Horizontal bars: groups = [(label, [(series, value), ...])]; returns the height used."""
    draw.text((x0, y0), title, fill="black", font=font)
    y = y0 + 22
    vmax = max([v for _, s in groups for _, v in s if v] or [1])
    label_w, bar_w = 330, w - 330 - 90
    for label, series in groups:
        draw.text((x0, y + 2), label, fill="black", font=font)
        for name, v in series:
            if v:
                draw.rectangle([x0 + label_w, y, x0 + label_w + int(bar_w * v / vmax), y + 12], fill=COLORS[name])
                draw.text((x0 + label_w + int(bar_w * v / vmax) + 4, y), f"{v:,.0f} {name}", fill="black", font=font)
            y += 15
        y += 8
    return y - y0


def line_chart(draw, font, x0, y0, w, h, points, title, xlabel):
    draw.text((x0, y0), title, fill="black", font=font)
    pts = [(x, v) for x, v in points if v]
    if len(pts) < 2:
        return 22
    top, left, bottom, right = y0 + 24, x0 + 60, y0 + h - 20, x0 + w - 20
    xmax, vmax = max(x for x, _ in pts), max(v for _, v in pts)
    draw.rectangle([left, top, right, bottom], outline="gray")
    xy = [(left + (right - left) * x / xmax, bottom - (bottom - top) * v / vmax) for x, v in pts]
    draw.line(xy, fill=COLORS["trainer"], width=2)
    for (px, py), (x, v) in zip(xy, pts):
        draw.ellipse([px - 3, py - 3, px + 3, py + 3], fill=COLORS["trainer"])
        draw.text((px - 10, bottom + 4), str(x), fill="black", font=font)
        draw.text((px + 4, py - 14), f"{v:,.0f}", fill="black", font=font)
    draw.text((right - 60, top - 12), xlabel, fill="gray", font=font)
    return h + 10


def picture(path, meta, train, pipe, cur):
    width, height = 1100, 2000
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default()
    y = 10
    draw.text((10, y), f"trainer benchmark suite ({meta['mode']}), {meta['date']}, {meta['gpu']}", fill="black", font=font)
    y += 24
    groups = [(r["workload"].replace(", training step (synthetic)", ""),
               [(k, r[k]) for k in ("trainer", "pytorch_eager", "torch_compile")]) for r in train if r["batch_size"] == 256]
    if groups:
        y += bars(draw, font, 10, y, width - 20, groups, "Training step, img/s (higher is better)") + 10
    side = [(r["workload"], [("trainer", r["trainer"])] +
             ([("torch_dataloader", r["torch_dataloader"])] if r["kind"] == "pipeline" else [("synthetic", r["synthetic"])]))
            for r in pipe]
    if side:
        y += bars(draw, font, 10, y, width - 20, side, "Input side, img/s") + 10
    if cur["pipeline_threads"]:
        y += line_chart(draw, font, 10, y, width - 20, 220, cur["pipeline_threads"],
                        "CPU pipeline img/s against decode threads", "threads") + 10
    if len(cur["resnet50_bf16_batch"]) > 1:
        y += line_chart(draw, font, 10, y, width - 20, 220, [(b, t) for b, t, *_ in cur["resnet50_bf16_batch"]],
                        "ResNet-50 bf16 training img/s against batch size", "batch size") + 10
    img.crop((0, 0, width, min(height, y + 10))).save(path)


def main():
    out = sys.argv[1]
    raw = load(out)
    if not raw:
        sys.exit(f"benchmark_report: no records under {out}/raw")

    def text(name, default=""):
        p = os.path.join(out, "logs", name)
        return open(p).read().strip() if os.path.exists(p) else default

    env = next((r["env"] for r in raw.values() if "env" in r), {})
    full = any(n.startswith(("threads_", "train_resnet18_")) for n in raw)
    meta = {"mode": "full" if full else "quick", "date": time.strftime("%Y-%m-%d"),
            "gpu": text("gpu.txt", env.get("gpu", "unknown GPU")),
            "trainer": text("version.txt").split("\n")[0].replace("trainer", "", 1).strip(),
            "commit": text("commit.txt", env.get("git_sha", "?")),
            "env": ", ".join(f"{k} {env[k]}" for k in ("libtorch", "cuda_runtime", "cudnn", "nccl") if k in env),
            "cpus": os.cpu_count()}
    train, pipe, cur = training_rows(raw), pipeline_rows(raw), curves(raw)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"meta": meta, "environment": env, "training": train, "input_side": pipe, "curves": cur,
                   "records": raw}, f, indent=1)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(markdown(meta, train, pipe, cur))
    picture(os.path.join(out, "report.png"), meta, train, pipe, cur)
    print(markdown(meta, train, pipe, cur))


if __name__ == "__main__":
    main()
