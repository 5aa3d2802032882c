#!/usr/bin/env python3
"""The PyTorch reference for `trainer bench`: the same workload (model, batch, image size, precision, memory
format, SGD with momentum 0.9 nesterov wd 5e-4, one synthetic batch resident on the GPU, warm-up excluded,
N timed steps between two synchronisations) in eager mode or under torch.compile. Prints and writes JSON.
Under torchrun (WORLD_SIZE set) it runs DistributedDataParallel over NCCL, one GPU per rank, and rank 0 reports
the job's images/s (W x its own; the ranks step in lockstep).

usage: bench_pytorch.py --model resnet50 --batch-size 256 --image-size 224 --precision bf16 \
                        [--channels-last] [--compile] [--steps 100] [--warmup 20] [--out result.json]
"""
import argparse
import os
import platform
import time

import torch

from result_json import emit


def build(name, num_classes):
    import timm  # timm's names equal ours; for ResNet these are torchvision's architectures too
    return timm.create_model(name, pretrained=False, num_classes=num_classes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--precision", choices=["bf16", "fp16", "fp32"], default="bf16")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--out")
    a = ap.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if world > 1:
        dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(dev)
        torch.distributed.init_process_group("nccl", device_id=dev)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    model = build(a.model, a.num_classes).to(dev)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size, device=dev).to(memory_format=fmt)
    y = torch.randint(a.num_classes, (a.batch_size,), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[a.precision]
    scaler = torch.amp.GradScaler("cuda", enabled=a.precision == "fp16")
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    fwd = torch.compile(model) if a.compile else model

    def step():
        with torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(fwd(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    sec = time.perf_counter() - t0
    res = {
        "tool": "pytorch",
        "mode": "compile" if a.compile else "eager",
        "workload": {"model": a.model, "batch_size": a.batch_size, "image_size": a.image_size,
                     "precision": a.precision, "channels_last": a.channels_last, "optimizer": "sgd",
                     "data": "synthetic, resident on the device"},
        "warmup_steps": a.warmup,
        "steps": a.steps,
        "img_per_s": world * a.steps * a.batch_size / sec,
        "world_size": world,
        "img_per_s_per_gpu": a.steps * a.batch_size / sec,
        "step_ms": 1000 * sec / a.steps,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else 0.0,
        "final_loss": float(loss),
        "env": {"gpu": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
                "torch": torch.__version__, "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version(), "python": platform.python_version()},
    }
    if world > 1:
        torch.distributed.destroy_process_group()
        if rank != 0:
            return
    emit(res, a.out)


if __name__ == "__main__":
    main()
