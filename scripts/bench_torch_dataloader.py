#!/usr/bin/env python3
"""The PyTorch reference for `trainer bench-data`: torchvision ImageFolder + DataLoader (PIL decode,
RandomResizedCrop 224 + horizontal flip, the same files and worker count), batches moved to the GPU and
normalised there as float (the same output as trainer's loader), warm-up batches excluded. Prints JSON.

usage: bench_torch_dataloader.py ROOT --workers N [--batch-size 256] [--batches 160] [--warmup 2*N]
                                 [--auto-augment none|rand|trivial] [--normalize-in-workers]
                                 [--epoch-iterators] [--out F]
(--auto-augment adds torchvision's RandAugment() or TrivialAugmentWide() after the flip, on the PIL image.
--normalize-in-workers: torchvision's own ImageNet recipe, ToTensor() + Normalize() in the workers, float batches
through pinned memory; by default the workers give uint8 and the GPU normalises, the faster of the two.)

Steady state, as trainer bench-data measures its loader: one sampler runs through as many shuffled passes over
the files as the run needs, so the workers never wait at an epoch's end (trainer's threads go on into the next
epoch; with a few thousand files the DataLoader would otherwise drain every 15 batches, which it would not on
ImageNet). Each worker makes a whole batch, so all of them finish their first batch at about the same time: the
warm-up (two batches per worker by default) and a long timed run (160 batches) keep that first wave from being
counted as free batches. --epoch-iterators restores a new iterator per epoch (torchvision's training loop);
with --warmup 5 --batches 40 it is how the figures before 2026-12-01 were taken.
"""
import argparse
import time

import torch
import torchvision
from torchvision import transforms

from result_json import emit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--batches", type=int, default=160)
    ap.add_argument("--warmup", type=int, default=None, help="default: two batches per worker")
    ap.add_argument("--auto-augment", choices=["none", "rand", "trivial"], default="none")
    ap.add_argument("--normalize-in-workers", action="store_true")
    ap.add_argument("--epoch-iterators", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.warmup is None:
        a.warmup = 2 * max(a.workers, 1)
    extra = {"none": [], "rand": [transforms.RandAugment()], "trivial": [transforms.TrivialAugmentWide()]}
    mean_, std_ = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    if a.normalize_in_workers:
        tail = [transforms.ToTensor(), transforms.Normalize(mean_, std_)]
    else:
        tail = [transforms.PILToTensor()]  # uint8; normalisation on the GPU, as trainer does
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip()] +
                            extra[a.auto_augment] + tail)
    ds = torchvision.datasets.ImageFolder(a.root, transform=tf)
    if a.epoch_iterators:
        sampler = torch.utils.data.RandomSampler(ds)
    else:  # shuffled passes back to back: one iterator for the whole run
        sampler = torch.utils.data.RandomSampler(ds, num_samples=(a.warmup + a.batches + 1) * a.batch_size)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers,
                                     pin_memory=True, drop_last=True, persistent_workers=True,
                                     prefetch_factor=4)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    mean = torch.tensor(mean_, device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor(std_, device=dev).view(1, 3, 1, 1) * 255

    def batches():
        while True:
            for x, y in dl:
                yield x, y

    it = batches()
    for _ in range(a.warmup):
        next(it)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    for _ in range(a.batches):
        x, y = next(it)
        x = x.to(dev, non_blocking=True).to(memory_format=torch.channels_last)
        if not a.normalize_in_workers:
            x = x.float().sub_(mean).div_(std)
        y = y.to(dev, non_blocking=True)
        n += x.shape[0]
    if dev.type == "cuda":
        torch.cuda.synchronize()
    sec = time.perf_counter() - t0
    res = {"tool": "torch DataLoader", "workers": a.workers, "batch_size": a.batch_size, "files": len(ds),
           "warmup_batches": a.warmup, "batches": a.batches,
           "epochs": "a new iterator per epoch" if a.epoch_iterators else "shuffled passes back to back",
           "augment": "RandomResizedCrop(224)+flip" + "".join("+" + type(t).__name__ for t in extra[a.auto_augment]) +
                      ", PIL",
           "output": "float32 channels_last on the device, normalised " +
                     ("in the workers (ToTensor+Normalize)" if a.normalize_in_workers else "on the device"),
           "img_per_s": n / sec}
    emit(res, a.out)


if __name__ == "__main__":
    main()
