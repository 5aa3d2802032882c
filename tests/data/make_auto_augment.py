#!/usr/bin/env python3
"""Fixtures for the RandAugment / TrivialAugmentWide parity test: torchvision's own op application
(torchvision.transforms.autoaugment._apply_op, what RandAugment and TrivialAugmentWide call, nearest
interpolation, no fill) on uint8 tensor images, for every op at several signed magnitudes, and torchvision's
magnitude tables for both policies.
usage: make_auto_augment.py OUTDIR
"""
import json
import sys

import numpy as np
import torch
from torchvision.transforms import autoaugment as AA
from torchvision.transforms import InterpolationMode


def photo_like(c, h, w, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([110 + 90 * np.sin(x / (5.0 + k) + k) * np.cos(y / (7.0 + k) - k) for k in range(c)], 0)
    return np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)


def main():
    out = sys.argv[1]
    H, W = 37, 45  # odd sizes: centres fall between pixels
    imgs = [photo_like(3, H, W, s) for s in range(3)]
    imgs.append(np.full((3, H, W), 77, np.uint8))              # flat: autocontrast/equalize leave it
    low = photo_like(3, H, W, 9) // 4 + 60                     # low contrast: autocontrast stretches it
    imgs.append(low.astype(np.uint8))
    x = torch.from_numpy(np.stack(imgs))                        # (5, 3, H, W) uint8
    x.numpy().tofile(f"{out}/aa_in.u8")
    ra = AA.RandAugment()._augmentation_space(31, (H, W))
    ta = AA.TrivialAugmentWide()._augmentation_space(31)
    names = list(ra.keys())
    cases = []
    outs = []
    for name in names:
        mags, signed = ra[name]
        values = [0.0] if mags.ndim == 0 else sorted({float(mags[b].item()) for b in (3, 9, 17, 30)})
        values = values + [-v for v in values if signed and v != 0.0]
        if name in ("ShearX", "ShearY", "Rotate"):
            wide = ta[name][0]
            values += [float(wide[30].item()), -float(wide[20].item())]  # TrivialAugmentWide's large ones
        for v in values:
            y = torch.stack([AA._apply_op(img, name, v, interpolation=InterpolationMode.NEAREST, fill=None)
                             for img in x])
            cases.append({"op": name, "magnitude": v})
            outs.append(y)
    torch.stack(outs).numpy().tofile(f"{out}/aa_out.u8")
    tables = {}
    for policy, space in (("rand", ra), ("trivial", ta)):
        tables[policy] = {k: ([] if m.ndim == 0 else [float(t) for t in m.tolist()], bool(s))
                          for k, (m, s) in space.items()}
    json.dump({"shape": list(x.shape), "ops": names, "cases": cases, "tables": tables, "H": H, "W": W},
              open(f"{out}/aa_meta.json", "w"), indent=1)


if __name__ == "__main__":
    main()
