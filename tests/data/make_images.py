#!/usr/bin/env python3
"""Fixtures for the data tests, encoded here at test time with Pillow: JPEG variants (baseline, progressive,
grayscale, CMYK, odd size, EXIF), a PNG with alpha, each with Pillow's decode as the reference (raw RGB), and
torchvision's antialiased bilinear resizes of a random image as the resize reference, torchvision's evaluation
transforms (Resize(floor(size / crop_pct)) + CenterCrop(size) on Pillow's decode) of grainy JPEGs, and torchvision's
colour-jitter ops (brightness, contrast, saturation, hue) on float images in given per-sample orders.
usage: make_images.py OUTDIR
"""
import json
import sys

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms.v2 import functional as F

# (size, crop_pct, interpolation) of the evaluation references: ResNet's and ViT's defaults, at small sizes
EVAL_CASES = [(64, 0.875, "bilinear"), (56, 0.9, "bicubic"), (100, 0.95, "bilinear")]


def photo_like(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 100 * np.sin(x / 17.0 + c) * np.cos(y / 23.0 - c) for c in range(3)], -1)
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def main():
    out = sys.argv[1]
    meta = {}
    rgb = Image.fromarray(photo_like(320, 240, 0))
    variants = {
        "baseline": (rgb, dict(quality=90)),
        "progressive": (rgb, dict(quality=90, progressive=True)),
        "gray": (rgb.convert("L"), dict(quality=90)),
        "cmyk": (rgb.convert("CMYK"), dict(quality=95)),
        "odd": (Image.fromarray(photo_like(37, 53, 1)), dict(quality=85)),
        "exif": (rgb, dict(quality=90, exif=Image.Exif())),
        # chroma not subsampled (MCUs of 8 x 8) and subsampled across only (16 x 8), odd sizes
        "s444": (Image.fromarray(photo_like(203, 141, 3)), dict(quality=90, subsampling=0)),
        "s422": (Image.fromarray(photo_like(157, 99, 4)), dict(quality=90, subsampling=1)),
    }
    ex = Image.Exif()
    ex[0x0112] = 1  # orientation tag present (value 1: as stored)
    variants["exif"] = (rgb, dict(quality=90, exif=ex.tobytes()))
    for name, (im, kw) in variants.items():
        path = f"{out}/{name}.jpg"
        im.save(path, format="JPEG", **kw)
        ref = np.asarray(Image.open(path).convert("RGB"))
        ref.tofile(f"{out}/{name}.rgb")
        meta[name] = {"w": ref.shape[1], "h": ref.shape[0]}
    rgba = Image.fromarray(np.concatenate([photo_like(61, 47, 2), np.full((47, 61, 1), 255, np.uint8)], -1), "RGBA")
    rgba.save(f"{out}/alpha.png")
    np.asarray(rgba.convert("RGB")).tofile(f"{out}/alpha.rgb")
    meta["alpha"] = {"w": 61, "h": 47}
    # resize references: torchvision antialiased bilinear and bicubic on uint8 (B,C,H,W)
    src = photo_like(300, 200, 3)
    src.tofile(f"{out}/resize_src.rgb")
    meta["resize_src"] = {"w": 300, "h": 200}
    t = torch.from_numpy(src).permute(2, 0, 1).unsqueeze(0)
    for (w, h) in [(224, 224), (97, 61), (480, 352)]:
        r = F.resize(t, [h, w], interpolation=F.InterpolationMode.BILINEAR, antialias=True)
        r[0].permute(1, 2, 0).contiguous().numpy().tofile(f"{out}/resize_{w}x{h}.rgb")
        r = F.resize(t, [h, w], interpolation=F.InterpolationMode.BICUBIC, antialias=True)
        r[0].permute(1, 2, 0).contiguous().numpy().tofile(f"{out}/resize_bicubic_{w}x{h}.rgb")
    # evaluation references: grainy photo-like JPEGs of odd sizes (landscape, portrait), through torchvision
    meta["eval"] = {"files": [], "cases": EVAL_CASES}
    for i, (w, h) in enumerate([(301, 229), (173, 257), (120, 90)]):
        name = f"eval{i}"
        Image.fromarray(photo_like(w, h, 10 + i)).save(f"{out}/{name}.jpg", format="JPEG", quality=92)
        meta["eval"]["files"].append(name)
        for size, crop_pct, interp in EVAL_CASES:
            mode = T.InterpolationMode.BICUBIC if interp == "bicubic" else T.InterpolationMode.BILINEAR
            tf = T.Compose([T.Resize(int(np.floor(size / crop_pct)), interpolation=mode), T.CenterCrop(size)])
            ref = np.asarray(tf(Image.open(f"{out}/{name}.jpg").convert("RGB")))
            ref.tofile(f"{out}/{name}_{size}_{interp}.rgb")
    # colour jitter references: torchvision's functional ops on float images, per-sample factors and orders
    g = torch.Generator().manual_seed(4)
    x = torch.rand(4, 3, 19, 23, generator=g)
    factors = [[1.3, 0.7, 1.2, 0.1], [0.6, 1.4, 0.5, -0.2], [1.0, 1.0, 1.0, 0.0], [0.9, 1.2, 0.0, 0.45]]
    orders = [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]]
    ops = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
    outs = []
    for i in range(4):
        y = x[i]
        for o in orders[i]:
            y = ops[o](y, factors[i][o])
        outs.append(y)
    x.numpy().tofile(f"{out}/jitter_in.f32")
    torch.stack(outs).numpy().tofile(f"{out}/jitter_out.f32")
    meta["jitter"] = {"factors": factors, "orders": orders, "shape": list(x.shape)}
    with open(f"{out}/meta.json", "w") as f:
        json.dump(meta, f)


if __name__ == "__main__":
    main()
