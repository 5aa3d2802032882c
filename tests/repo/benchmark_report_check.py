#!/usr/bin/env python3
"""The benchmark report is a pure function of a suite's raw records: written again from the committed run's raw/
and logs/ into a scratch folder, report.md equals the committed one but for its date line, results.json holds every
raw record, and report.png is a picture. Also checks the ratios against the raw figures."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
run = os.path.join(root, "bench", "results", "2026-12-02_h200", "run59_suite")
with tempfile.TemporaryDirectory() as tmp:
    for sub in ("raw", "logs"):
        shutil.copytree(os.path.join(run, sub), os.path.join(tmp, sub))
    subprocess.run([sys.executable, os.path.join(root, "scripts", "benchmark_report.py"), tmp], check=True,
                   stdout=subprocess.DEVNULL)
    got = open(os.path.join(tmp, "report.md")).read().splitlines()[1:]
    want = open(os.path.join(run, "report.md")).read().splitlines()[1:]
    assert got == want, "report.md differs from the committed one:\n" + "\n".join(
        f"- {w}\n+ {g}" for w, g in zip(want, got) if w != g)
    res = json.load(open(os.path.join(tmp, "results.json")))
    assert sorted(res["records"]) == sorted(f[:-5] for f in os.listdir(os.path.join(run, "raw"))), "records lost"
    raw = res["records"]
    row = next(r for r in res["training"] if r["model"] == "resnet50" and r["precision"] == "bf16"
               and r["batch_size"] == 256)
    ours = raw["train_resnet50_bf16_bs256_trainer"]["img_per_s"]
    assert abs(row["vs_compile"] - ours / raw["train_resnet50_bf16_bs256_compile"]["img_per_s"]) < 1e-12
    with open(os.path.join(tmp, "report.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", "report.png is not a PNG"
print("benchmark report reproduces run59_suite")
