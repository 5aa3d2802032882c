#!/usr/bin/env python3
"""Round trip: loads weights exported by the C++ model into timm's model of the same name with
model.load_state_dict(safetensors.torch.load_file(path)) and checks that its logits equal the C++ logits.

usage: check_export.py NAME WEIGHTS IO   (IO holds 'input' and the C++ 'logits'); exit 0 when they match
"""
import sys

import timm
import torch
from safetensors.torch import load_file


def main():
    name, weights, io_path = sys.argv[1:4]
    extra = dict(kv.split("=") for kv in sys.argv[4:])
    kwargs = {k: int(v) for k, v in extra.items()}
    model = timm.create_model(name, pretrained=False, **kwargs)
    model.load_state_dict(load_file(weights))  # strict: every name and shape must match
    model.eval()
    io = load_file(io_path)
    with torch.no_grad():
        ours = model(io["input"])
    ref = io["logits"]
    rel = ((ours - ref).abs().max() / ref.abs().max()).item()
    print(f"{name}: max relative difference {rel:.3e}")
    sys.exit(0 if rel < 1e-4 else 1)


if __name__ == "__main__":
    main()
