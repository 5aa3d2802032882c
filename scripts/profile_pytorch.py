#!/usr/bin/env python3
"""torch.profiler Chrome trace of PyTorch training steps with the workload of bench_pytorch.py (timm model, SGD
nesterov, autocast, synthetic batch on the GPU), to diff against `trainer --profile` (scripts/kernel_table.py).

usage: profile_pytorch.py --model vit_base_patch16_224 --precision bf16 [--channels-last] [--compile] --out trace.json
(--compile: the model under torch.compile, compiled during the 20 warm-up steps.)
"""
import argparse

import torch
import timm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vit_base_patch16_224")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = timm.create_model(a.model, num_classes=1000).to(dev).to(memory_format=fmt)
    fwd = torch.compile(model) if a.compile else model
    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size, device=dev).to(memory_format=fmt)
    y = torch.randint(1000, (a.batch_size,), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float16

    def step():
        with torch.autocast("cuda", dtype=dtype):
            loss = torch.nn.functional.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(a.out)


if __name__ == "__main__":
    main()
