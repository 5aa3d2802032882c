#!/usr/bin/env python3
"""Makes the fixtures of the model parity tests: for each timm model name (or wrn{depth}_{k}, the Wide ResNet of
wrn_reference.py: 10 classes, 32 px inputs), a randomly initialised model's weights (safetensors), an input, its
fp32 eval logits, FLOPs (torch.utils.flop_counter), parameter count, input size and class count; with --grads, the
gradients of a train-mode forward+backward too. Run at test time; nothing is committed.

usage: make_parity.py OUTDIR NAME [NAME...] [--grads NAME...]
"""
import json
import sys

import os

import timm
import torch
from safetensors.torch import save_file
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wrn_reference  # noqa: E402


def create(name):
    """(model, input side, classes)"""
    if name.startswith("wrn"):
        return wrn_reference.create(name, num_classes=10), 32, 10
    return timm.create_model(name, pretrained=False), 224, 1000


def randomise_norms(model, gen):
    # zero-init-last and unit BN would make most blocks identities; give every norm real statistics
    for m in model.modules():
        if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
            with torch.no_grad():
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                    m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)


def main():
    args = sys.argv[1:]
    out = args.pop(0)
    grads = []
    if "--grads" in args:
        i = args.index("--grads")
        grads = args[i + 1:]
        args = args[:i]
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    for name in args + [g for g in grads if g not in args]:
        model, size, classes = create(name)
        randomise_norms(model, gen)
        model.eval()
        x = torch.randn(2, 3, size, size, generator=gen)
        with torch.no_grad():
            logits = model(x)
        # the math SDPA backend decomposes attention into counted matmuls (the CPU flash kernel is not counted)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with FlopCounterMode(display=False) as fc, sdpa_kernel(SDPBackend.MATH):
            with torch.no_grad():
                model(x[:1])
        tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(tensors, f"{out}/{name}.weights.safetensors")
        io = {"input": x.contiguous(), "logits": logits.contiguous()}
        if name in grads:
            model.train()
            model.zero_grad()
            target = torch.arange(2) % classes
            loss = torch.nn.functional.cross_entropy(model(x), target)
            loss.backward()
            io["loss"] = loss.detach().reshape(1)
            for k, p in model.named_parameters():
                io["grad." + k] = p.grad.contiguous()
        save_file(io, f"{out}/{name}.io.safetensors")
        meta = {"params": sum(p.numel() for p in model.parameters()), "flops": fc.get_total_flops(),
                "input_size": size, "num_classes": classes}
        if name.startswith("vit_tiny_patch16"):
            # timm's own pos_embed resampling, for the C++ resample test (224 -> 160 px: 14x14 -> 10x10 grid)
            from timm.layers import resample_abs_pos_embed
            res = resample_abs_pos_embed(model.pos_embed.detach(), new_size=(10, 10), num_prefix_tokens=1)
            save_file({"pos160": res.contiguous()}, f"{out}/{name}.pos160.safetensors")
        with open(f"{out}/{name}.json", "w") as f:
            json.dump(meta, f)
    # torchvision names equal timm's for ResNet: record torchvision's key list for resnet18/50
    import torchvision
    for name in ("resnet18", "resnet50"):
        keys = list(getattr(torchvision.models, name)().state_dict().keys())
        with open(f"{out}/{name}.torchvision_keys.json", "w") as f:
            json.dump(keys, f)


if __name__ == "__main__":
    main()
