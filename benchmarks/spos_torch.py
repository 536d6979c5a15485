#!/usr/bin/python3
# The PyTorch peer of `mtc-train --model spos`: the official SPOS ShuffleNetV2 supernet
# (megvii-model/SinglePathOneShot's Supernet: stages [4,4,8,4], channels 16 | 64, 160,
# 320, 640 | 1024, four choices per block, BatchNorm2d(affine=False) throughout, PyTorch's
# default initialisation as mtc's), trained on N(0,1) images with uniform labels, the
# first --overfit_batches batches in turn, one path per iteration: a fresh uniform draw,
# one of --pool paths drawn once, or the fixed --path. Prints `iter N loss X` per
# iteration, as mtc-train does with --log_every 1; spos_loss.sh compares the two.
# Runs under Debian's python3-torch (/usr/bin/python3). Exit status 2 on bad flags.
import argparse
import random
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print(f"torch is missing for {sys.executable}: install it with scripts/deps.sh --torch "
          "(Debian's python3-torch)", file=sys.stderr)
    sys.exit(2)


def bn(c):
    return nn.BatchNorm2d(c, affine=False)


def channel_split(x):
    """The official channel_shuffle: even channels to the identity half, odd to the branch."""
    b, c, h, w = x.size()
    x = x.reshape(b * c // 2, 2, h * w).permute(1, 0, 2).reshape(2, -1, c // 2, h, w)
    return x[0], x[1]


def projection(inp, k):
    return nn.Sequential(nn.Conv2d(inp, inp, k, 2, k // 2, groups=inp, bias=False), bn(inp),
                         nn.Conv2d(inp, inp, 1, bias=False), bn(inp), nn.ReLU())


class Choice(nn.Module):
    """A ShuffleNetV2 unit with a k x k depthwise kernel (k = 3, 5, 7) or, k = 0, the
    Xception-like unit (three depthwise 3x3 + pointwise)."""

    def __init__(self, inp, oup, mid, k, stride):
        super().__init__()
        self.stride, out = stride, oup - inp
        if k:
            self.main = nn.Sequential(
                nn.Conv2d(inp, mid, 1, bias=False), bn(mid), nn.ReLU(),
                nn.Conv2d(mid, mid, k, stride, k // 2, groups=mid, bias=False), bn(mid),
                nn.Conv2d(mid, out, 1, bias=False), bn(out), nn.ReLU())
        else:
            self.main = nn.Sequential(
                nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False), bn(inp),
                nn.Conv2d(inp, mid, 1, bias=False), bn(mid), nn.ReLU(),
                nn.Conv2d(mid, mid, 3, 1, 1, groups=mid, bias=False), bn(mid),
                nn.Conv2d(mid, mid, 1, bias=False), bn(mid), nn.ReLU(),
                nn.Conv2d(mid, mid, 3, 1, 1, groups=mid, bias=False), bn(mid),
                nn.Conv2d(mid, out, 1, bias=False), bn(out), nn.ReLU())
        if stride == 2:
            self.proj = projection(inp, k or 3)

    def forward(self, x):
        if self.stride == 1:
            a, b = channel_split(x)
            return torch.cat((a, self.main(b)), 1)
        return torch.cat((self.proj(x), self.main(x)), 1)


class Supernet(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.first = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), bn(16), nn.ReLU())
        self.blocks = nn.ModuleList()
        cin = 16
        for stage, (reps, cout) in enumerate(zip([4, 4, 8, 4], [64, 160, 320, 640])):
            for i in range(reps):
                inp, stride = (cin, 2) if i == 0 else (cin // 2, 1)
                self.blocks.append(nn.ModuleList([Choice(inp, cout, cout // 2, k, stride) for k in (3, 5, 7, 0)]))
                cin = cout
        self.last = nn.Sequential(nn.Conv2d(640, 1024, 1, bias=False), bn(1024), nn.ReLU())
        self.classifier = nn.Linear(1024, classes, bias=False)

    def forward(self, x, path):
        x = self.first(x)
        for block, c in zip(self.blocks, path):
            x = block[c](x)
        return self.classifier(self.last(x).mean((2, 3)))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--image_size", type=int, default=32)
    p.add_argument("--num_classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--overfit_batches", type=int, default=2)
    p.add_argument("--pool", type=int, default=0, help="paths drawn once; 0: a fresh path every iteration")
    p.add_argument("--path", default="", help="a fixed path, 20 choices in 0-3 comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    bad = lambda what: (print(f"spos_torch.py: {what}", file=sys.stderr), sys.exit(2))
    for name in ("batch", "iterations", "image_size", "num_classes", "overfit_batches", "threads"):
        if getattr(a, name) < 1:
            bad(f"--{name} {getattr(a, name)}: expected >= 1")
    if a.pool < 0:
        bad(f"--pool {a.pool}: expected >= 0")
    fixed = None
    if a.path:
        try:
            fixed = [int(c) for c in a.path.split(",")]
        except ValueError:
            fixed = []
        if len(fixed) != 20 or any(c not in range(4) for c in fixed):
            bad(f"--path '{a.path}': expected 20 choices in 0-3, comma-separated")
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = random.Random(a.seed + 1)
    draw = lambda: [rng.randrange(4) for _ in range(20)]
    net = Supernet(a.num_classes)
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr)
    g = torch.Generator().manual_seed(a.seed + 2)
    batches = [(torch.randn(a.batch, 3, a.image_size, a.image_size, generator=g),
                torch.randint(0, a.num_classes, (a.batch,), generator=g)) for _ in range(a.overfit_batches)]
    pool = [draw() for _ in range(a.pool)]
    for it in range(a.iterations):
        path = fixed if fixed else pool[rng.randrange(len(pool))] if pool else draw()
        x, y = batches[it % len(batches)]
        loss = F.cross_entropy(net(x, path), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"iter {it + 1} loss {loss.item():.6f}", flush=True)


if __name__ == "__main__":
    main()
