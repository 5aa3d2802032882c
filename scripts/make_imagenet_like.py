#!/usr/bin/env python3
"""Makes an ImageNet-like JPEG benchmark set from real photographs: random crops of about 500x400 px from the
source photos, with sensor-like grain so that files average 90-110 KB at quality 90 (smooth wallpaper crops are
only ~35 KB and decode 2.5x faster, which would flatter every figure). Written as an ImageFolder:
OUT/train/<class>/*.jpg and OUT/val/<class>/*.jpg, class = source photo.

usage: make_imagenet_like.py SRC_DIR OUT [--train N] [--val N] [--grain SIGMA] [--seed S]
SRC_DIR: folder of photographs (e.g. Debian's mate-backgrounds: /usr/share/backgrounds/mate/nature).
"""
import argparse
import io
import multiprocessing
import os
import random

import numpy as np
from PIL import Image


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--val", type=int, default=500)
    ap.add_argument("--grain", type=float, default=17.0, help="std of the per-pixel noise, 0..255 scale (17: ~95 KB files)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    a = ap.parse_args()
    photos = sorted(f for f in os.listdir(a.src) if f.lower().endswith((".jpg", ".jpeg", ".png")))
    assert photos, f"no photos in {a.src}"
    images = []
    for f in photos:
        im = Image.open(os.path.join(a.src, f)).convert("RGB")
        if min(im.size) < 420:
            continue
        images.append((os.path.splitext(f)[0], im))
    global _IMAGES, _ARGS
    _IMAGES, _ARGS = images, a
    jobs = [(split, i) for split, count in (("train", a.train), ("val", a.val)) for i in range(count)]
    with multiprocessing.Pool(a.jobs) as pool:
        sizes = pool.map(make_one, jobs, chunksize=16)
    print(f"{len(sizes)} files, {len(images)} classes, mean {np.mean(sizes) / 1e3:.1f} KB")


_IMAGES, _ARGS = None, None


def make_one(job):
    split, i = job
    a, images = _ARGS, _IMAGES
    # every file's randomness comes from (seed, split, index): the set is the same whatever the job count
    rng = random.Random(f"{a.seed}/{split}/{i}")
    nrng = np.random.default_rng([a.seed, 0 if split == "train" else 1, i])
    name, im = images[i % len(images)]
    w = rng.randint(440, 560)
    h = rng.randint(360, 460)
    s = rng.uniform(0.6, 1.0)  # zoom: crop a larger area and shrink, as camera framing varies
    cw, ch = min(im.width, int(w / s)), min(im.height, int(h / s))
    x, y = rng.randint(0, im.width - cw), rng.randint(0, im.height - ch)
    crop = im.crop((x, y, x + cw, y + ch)).resize((w, h), Image.BILINEAR)
    arr = np.asarray(crop, dtype=np.float32)
    arr += nrng.normal(0.0, a.grain, arr.shape).astype(np.float32)
    out = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    d = os.path.join(a.out, split, name)
    os.makedirs(d, exist_ok=True)
    buf = io.BytesIO()
    out.save(buf, format="JPEG", quality=90)
    with open(os.path.join(d, f"{i:06d}.jpg"), "wb") as fh:
        fh.write(buf.getvalue())
    return len(buf.getvalue())



if __name__ == "__main__":
    main()
