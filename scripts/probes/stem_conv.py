"""Times ResNet's 7x7/2 stem convolution (forward + weight gradient, the input needs no gradient) on the GPU
for 3 input channels and for the input zero-padded to 4 or 8 channels, bf16 and fp16, channels_last, bs 256.
cuDNN pads 3 channels itself (nhwcAddPaddingKernel) and may pick a different kernel than for 4 or 8.
Prints one JSON line per case."""
import json
import sys

import torch
import torch.nn.functional as F


def time_case(dtype, cin, n=256, size=224, steps=30):
    dev = "cuda"
    x = torch.randn(n, cin, size, size, device=dev, dtype=dtype).contiguous(memory_format=torch.channels_last)
    w = torch.randn(64, cin, 7, 7, device=dev, dtype=dtype).contiguous(memory_format=torch.channels_last)
    w.requires_grad_(True)
    g = torch.randn(n, 64, size // 2, size // 2, device=dev, dtype=dtype).contiguous(memory_format=torch.channels_last)

    def step():
        y = F.conv2d(x, w, stride=2, padding=3)
        (gw,) = torch.autograd.grad(y, w, g)
        return gw

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    fwd = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    fwd[0].record()
    for _ in range(steps):
        F.conv2d(x, w, stride=2, padding=3)
    fwd[1].record()
    for _ in range(steps):
        step()
    fwd[2].record()
    torch.cuda.synchronize()
    f_ms = fwd[0].elapsed_time(fwd[1]) / steps
    both_ms = fwd[1].elapsed_time(fwd[2]) / steps
    flops = 2.0 * n * (size // 2) ** 2 * 64 * 3 * 49  # the useful (3-channel) work of the forward
    return {"dtype": str(dtype).replace("torch.", ""), "cin": cin, "forward_ms": round(f_ms, 4),
            "forward_plus_wgrad_ms": round(both_ms, 4), "wgrad_ms": round(both_ms - f_ms, 4),
            "useful_tflops_forward": round(flops / f_ms / 1e9, 1)}


def main():
    torch.backends.cudnn.benchmark = True
    for dtype in (torch.bfloat16, torch.float16):
        for cin in (3, 4, 8):
            print(json.dumps(time_case(dtype, cin)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
