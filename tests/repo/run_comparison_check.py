#!/usr/bin/env python3
"""scripts/compare_runs.py and scripts/eval_summary.py on crafted metrics.jsonl files: the loss distances, the
last evaluations and their mean and spread come out as computed by hand; a line that is not JSON is named."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def run(script, *args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script), *args], capture_output=True,
                          text=True)


def main():
    with tempfile.TemporaryDirectory() as d:
        a, b, bad = (os.path.join(d, n) for n in ("a.jsonl", "b.jsonl", "bad.jsonl"))
        write(a, [{"kind": "train", "step": 1, "loss": 2.0}, {"kind": "train", "step": 2, "loss": 1.0},
                  {"kind": "eval", "step": 2, "epoch": 0, "top1": 90.0, "top1_hflip": 91.0},
                  {"kind": "eval", "step": 4, "epoch": 1, "top1": 95.0, "top1_hflip": 96.0},
                  {"kind": "eval_ema", "step": 4, "epoch": 1, "top1": 95.5}])
        write(b, [{"kind": "train", "step": 1, "loss": 2.5}, {"kind": "train", "step": 2, "loss": 0.9},
                  {"kind": "train", "step": 3, "loss": 0.5},
                  {"kind": "eval", "step": 4, "epoch": 1, "top1": 94.0, "top1_hflip": 95.0}])
        with open(bad, "w") as f:
            f.write('{"kind": "train", "step": 1, "loss": 1}\n{oops\n')
        out = os.path.join(d, "cmp.json")
        r = run("compare_runs.py", a, b, "--json", out)
        assert r.returncode == 0, r.stderr
        c = json.load(open(out))["runs"][b]
        assert c["steps"] == 2 and abs(c["mean_abs_loss_diff"] - 0.3) < 1e-9 and abs(c["max_abs_loss_diff"] - 0.5) < 1e-9, c
        assert c["final_step"] == 2 and c["top1"] == 94.0 and c["top1_ref"] == 95.0, c
        out = os.path.join(d, "sum.json")
        r = run("eval_summary.py", a, b, "--json", out)
        assert r.returncode == 0, r.stderr
        s = json.load(open(out))["summary"]
        assert abs(s["eval.top1"]["mean"] - 94.5) < 1e-9 and s["eval.top1"]["min"] == 94.0, s
        assert abs(s["eval.top1_hflip"]["mean"] - 95.5) < 1e-9, s
        assert "eval_ema.top1" not in s, "a figure one run lacks has no summary"
        r = run("compare_runs.py", bad, a)
        assert r.returncode != 0 and "bad.jsonl:2: not a JSON line" in r.stderr, r.stderr
    print("run comparison scripts: ok")


if __name__ == "__main__":
    main()
