"""A Wide ResNet (CIFAR form) written after the authors' functional PyTorch code (szagoruyko/wide-residual-
networks, pytorch/resnet.py): pre-activation blocks, the shortcut a 1x1 conv of relu(bn(x)) where the shape
changes, then bn + ReLU, global average pooling and fc. timm has no such model, so the parity tests check
trainer's against this one; the module names are trainer's (conv1, layer{1..3}.{i}.{bn1,conv1,bn2,conv2,shortcut},
norm, fc)."""
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=False) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        o1 = F.relu(self.bn1(x))
        z = self.conv2(F.relu(self.bn2(self.conv1(o1))))
        return z + (self.shortcut(o1) if self.shortcut is not None else x)


class WideResNet(nn.Module):
    def __init__(self, depth, widen, num_classes=10, in_chans=3):
        super().__init__()
        assert (depth - 4) % 6 == 0
        n = (depth - 4) // 6
        widths = [16 * widen, 32 * widen, 64 * widen]
        self.conv1 = nn.Conv2d(in_chans, 16, 3, 1, 1, bias=False)
        cin = 16
        for stage, w in enumerate(widths):
            blocks = []
            for i in range(n):
                blocks.append(Block(cin, w, 2 if (stage > 0 and i == 0) else 1))
                cin = w
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.norm = nn.BatchNorm2d(cin)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        y = self.layer3(self.layer2(self.layer1(self.conv1(x))))
        y = F.relu(self.norm(y)).mean((2, 3))
        return self.fc(y)


def create(name, num_classes=10):
    """wrn{depth}_{widen}, e.g. wrn28_10."""
    depth, widen = name[len("wrn"):].split("_")
    return WideResNet(int(depth), int(widen), num_classes)
