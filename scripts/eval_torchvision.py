#!/usr/bin/env python3
"""Evaluates trainer's exported weights with torchvision's eval transforms (PIL decode, Resize of the shorter
side with PIL's antialiased bilinear, CenterCrop, ToTensor, Normalize) in timm's model of the same name: the
other half of the interpolation check (train with trainer's resize, evaluate with torchvision's; compare with
`trainer eval` on the same weights and files). Prints JSON (top-1, top-5, loss, images).

usage: eval_torchvision.py VAL_ROOT WEIGHTS --model resnet18 --num-classes N [--image-size 224] [--crop-pct 0.875]
                           [--out F]
"""
import argparse
import math

import timm
import torch
import torchvision
from safetensors.torch import load_file
from torchvision import transforms

from result_json import emit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("weights")
    ap.add_argument("--model", required=True)
    ap.add_argument("--num-classes", type=int, required=True)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--crop-pct", type=float, default=0.875)
    ap.add_argument("--out")
    a = ap.parse_args()
    model = timm.create_model(a.model, pretrained=False, num_classes=a.num_classes)
    model.load_state_dict(load_file(a.weights))  # strict
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = model.to(dev).eval()
    resize = int(math.floor(a.image_size / a.crop_pct))
    tf = transforms.Compose([transforms.Resize(resize, interpolation=transforms.InterpolationMode.BILINEAR),
                             transforms.CenterCrop(a.image_size), transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(a.root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=250, num_workers=8)
    top1 = top5 = n = 0
    loss = 0.0
    with torch.no_grad():
        for x, y in dl:
            x, y = x.to(dev), y.to(dev)
            logits = model(x).float()
            loss += torch.nn.functional.cross_entropy(logits, y, reduction="sum").item()
            k = logits.topk(min(5, logits.shape[1]), 1).indices
            top1 += (k[:, 0] == y).sum().item()
            top5 += (k == y.unsqueeze(1)).any(1).sum().item()
            n += y.numel()
    res = {"tool": "torchvision eval transforms (PIL) + timm", "model": a.model, "weights": a.weights,
           "resize_shorter": resize, "crop": a.image_size, "images": n, "top1": 100.0 * top1 / n,
           "top5": 100.0 * top5 / n, "loss": loss / n}
    emit(res, a.out)


if __name__ == "__main__":
    main()
