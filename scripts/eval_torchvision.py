#!/usr/bin/env python3
"""Evaluates trainer's exported weights with torchvision's eval transforms (PIL decode, Resize of the shorter
side with PIL's antialiased filter, CenterCrop, ToTensor, Normalize) in timm's model of the same name: the other
half of the eval-parity check (compare with `trainer eval` on the same weights and files). The filter, crop and
normalisation default to what trainer's model defaults are (data.interpolation auto, data.crop_pct 0): bicubic,
crop 0.9 and mean = std = 0.5 for ViTs (timm's data config), bilinear, 0.875 and ImageNet's mean and std for
ResNets (torchvision's). Prints JSON (top-1, top-5, loss, images).

usage: eval_torchvision.py VAL_ROOT WEIGHTS --model resnet18 --num-classes N [--image-size 224] [--crop-pct P]
                           [--interpolation bilinear|bicubic] [--out F]
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
    ap.add_argument("--crop-pct", type=float, default=None, help="default: trainer's for the model (0.9 ViT, 0.875)")
    ap.add_argument("--interpolation", choices=["bilinear", "bicubic"], default=None,
                    help="default: trainer's for the model (bicubic for ViT, bilinear)")
    ap.add_argument("--out")
    a = ap.parse_args()
    model = timm.create_model(a.model, pretrained=False, num_classes=a.num_classes)
    model.load_state_dict(load_file(a.weights))  # strict
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = model.to(dev).eval()
    vit = a.model.startswith("vit")
    crop_pct = a.crop_pct or (0.9 if vit else 0.875)
    interpolation = a.interpolation or ("bicubic" if vit else "bilinear")
    mean, std = ([0.5] * 3, [0.5] * 3) if vit else ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    resize = int(math.floor(a.image_size / crop_pct))
    mode = {"bilinear": transforms.InterpolationMode.BILINEAR, "bicubic": transforms.InterpolationMode.BICUBIC}
    tf = transforms.Compose([transforms.Resize(resize, interpolation=mode[interpolation]),
                             transforms.CenterCrop(a.image_size), transforms.ToTensor(),
                             transforms.Normalize(mean, std)])
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
           "resize_shorter": resize, "crop": a.image_size, "interpolation": interpolation, "images": n, "top1": 100.0 * top1 / n,
           "top5": 100.0 * top5 / n, "loss": loss / n}
    emit(res, a.out)


if __name__ == "__main__":
    main()
