#!/usr/bin/env python3
"""Fixtures for the engine parity tests, made with PyTorch on the CPU in fp32:
  - resnet18 (timm, in_chans=1, 10 classes) initial weights, 30 fixed batches of 32, and the losses and final
    weights of 30 steps of torch.optim.SGD (momentum 0.9, nesterov, wd 5e-4) and of torch.optim.AdamW, each with timm's
    param_groups_weight_decay split (no decay on 1-D params);
  - the same for timm.optim.Lamb (lr 5e-4, wd 0.05, eps 1e-6, its global grad-norm clip at 1.0);
  - the scale sequence of torch.amp.GradScaler('cpu', growth_interval=3) on a crafted overflow sequence;
  - torchvision.transforms.v2 MixUp and CutMix on a fixed batch: their random draws (lambda, box centre) and
    their outputs (images, soft labels), for tests/engine's mix parity.
usage: make_engine_parity.py OUTDIR
"""
import json
import sys

import timm
import torch
from safetensors.torch import save_file
from timm.optim import Lamb, param_groups_weight_decay
from torchvision.transforms import v2

STEPS, BATCH = 30, 32
# one intra-op thread, as the C++ side runs: the same wheel's CPU kernels then give the same rounding on both sides
# whatever the machine's cores (with 1 here and 2 there, SGD's 30 steps drift apart from step ~17)
torch.set_num_threads(1)


def train(opt_name, init, batches, labels):
    model = timm.create_model("resnet18", in_chans=1, num_classes=10)
    model.load_state_dict(init)
    model.train()
    groups = param_groups_weight_decay(model, weight_decay=5e-4)
    if opt_name == "sgd":
        opt = torch.optim.SGD(groups, lr=0.005, momentum=0.9, nesterov=True)
    elif opt_name == "lamb":
        groups = param_groups_weight_decay(model, weight_decay=0.05)
        opt = Lamb(groups, lr=5e-4, eps=1e-6, max_grad_norm=1.0)
    else:
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for i in range(STEPS):
        loss = torch.nn.functional.cross_entropy(model(batches[i]), labels[i])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, {k: v.contiguous() for k, v in model.state_dict().items()}


def mix_cases(out):
    """torchvision's own MixUp/CutMix on a fixed batch. Each case records torchvision's random draws (replayed from
    the same seed: Beta sample, then for CutMix the box centre) and what its transform produced."""
    n, c, h, w, classes = 6, 3, 20, 28, 5
    images = torch.randn(n, c, h, w)
    labels = torch.tensor([0, 3, 1, 4, 2, 3])
    cases, tensors = [], {"images": images, "labels": labels}
    for i, (kind, alpha) in enumerate([("mixup", 0.2), ("mixup", 1.0), ("cutmix", 1.0), ("cutmix", 0.5),
                                        ("cutmix", 2.0), ("cutmix", 0.1)]):
        seed = 100 + i
        t = (v2.MixUp if kind == "mixup" else v2.CutMix)(alpha=alpha, num_classes=classes)
        torch.manual_seed(seed)
        x, y = t(images, labels)
        torch.manual_seed(seed)
        lam = float(torch.distributions.Beta(torch.tensor([alpha]), torch.tensor([alpha])).sample(()))
        case = {"kind": kind, "lam": lam}
        if kind == "cutmix":
            case["rx"] = int(torch.randint(w, size=(1,)))
            case["ry"] = int(torch.randint(h, size=(1,)))
        cases.append(case)
        tensors[f"x{i}"] = x.contiguous()
        tensors[f"y{i}"] = y.contiguous()
    save_file(tensors, f"{out}/mix.safetensors")
    return {"classes": classes, "cases": cases}


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    init = timm.create_model("resnet18", in_chans=1, num_classes=10).state_dict()
    init = {k: v.clone().contiguous() for k, v in init.items()}
    # well-conditioned training (learnable data, batch 64, small lr): on noisy settings the loss goes chaotic and
    # rounding differences grow without bound -- torch's own foreach and fused SGD then disagree by 1e-2 within
    # 50 steps; here they agree to 3e-7 (AdamW at lr 1e-4: 2e-7), so a 1e-4 tolerance tests semantics, not luck
    labels = torch.randint(10, (STEPS, BATCH))
    batches = torch.randn(STEPS, BATCH, 1, 32, 32) * 0.2 + (labels.float() / 4.5 - 1.0).view(STEPS, BATCH, 1, 1, 1)
    save_file(init, f"{out}/init.safetensors")
    save_file({"images": batches, "labels": labels}, f"{out}/batches.safetensors")
    result = {}
    for name in ("sgd", "adamw", "lamb"):
        losses, final = train(name, init, batches, labels)
        result[name] = losses
        save_file(final, f"{out}/{name}_final.safetensors")

    # GradScaler on a crafted sequence: 1 = an inf gradient at that step
    p = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                                  growth_interval=3)
    overflow = [0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    scales, params = [], []
    for bad in overflow:
        scaler.scale(torch.ones(()))  # GradScaler initialises its state lazily here
        scale = scaler.get_scale()
        g = torch.full((4,), 0.5 * scale)
        if bad:
            g[1] = float("inf")
        p.grad = g
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        params.append(p.detach()[0].item())
    result["scaler"] = {"overflow": overflow, "scales": scales, "param0": params}
    # SGD with Nesterov momentum and weight decay under the scaler, the first step skipped (an inf gradient):
    # torch makes the momentum buffer at the first step it takes
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 3.0]))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=2)
    overflow = [1, 0, 0, 1, 0, 0]
    steps = []
    for i, bad in enumerate(overflow):
        scaler.scale(torch.ones(()))
        scale = scaler.get_scale()
        g = torch.tensor([0.5, -0.25, 1.0, 0.125]) * (1 + 0.5 * i) * scale
        if bad:
            g[2] = float("inf")
        p.grad = g
        scaler.step(opt)
        scaler.update()
        steps.append(p.detach().tolist())
    result["scaler_momentum"] = {"overflow": overflow, "params": steps}
    result["mix"] = mix_cases(out)
    with open(f"{out}/engine.json", "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
