#!/usr/bin/python3
# The PyTorch peer of mtc-train: the same CIFAR ResNet-(6n+2) or ResNet-50 (torchvision's
# layout), optimiser, loss and synthetic data, timed the same way, ending with the same
# `summary ...` line, so resnet_cpu_vs_torch.sh and resnet50_gpu.sh can compare the two.
# Runs under Debian's python3-torch (/usr/bin/python3) on the CPU, or on a GPU with
# --device cuda (fp32: TF32 off for cuDNN and matmuls, as mtc computes in fp32; the peak is
# torch.cuda.max_memory_allocated). Exit status 2 on bad flags.
import argparse
import resource
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    # One line and exit status 2 rather than a traceback: Debian's python3-torch installs
    # for /usr/bin/python3, which need not be the python3 first on PATH.
    print(f"torch is missing for {sys.executable}: install it with scripts/deps.sh --torch "
          "(Debian's python3-torch)", file=sys.stderr)
    sys.exit(2)


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, plus a shortcut: 1x1 conv (stride s, no bias) + BN when
    the shape changes, identity otherwise; ReLU after the sum."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class Bottleneck(nn.Module):
    """torchvision's ResNet v1.5 bottleneck: 1x1, 3x3 (stride here), 1x1 (x4), each with BN;
    shortcut 1x1 conv (stride) + BN when the shape changes; ReLU after the sum."""

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    """torchvision's resnet50: conv7x7/2 3->64, BN, ReLU, maxpool 3x3/2; stages of 3, 4, 6, 3
    bottlenecks (widths 64..512, stride 2 from stage 2); global average pool; Linear."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        blocks, cin = [], 64
        for stage, (count, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
            for i in range(count):
                blocks.append(Bottleneck(cin, width, 2 if stage > 0 and i == 0 else 1))
                cin = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class CifarResNet(nn.Module):
    """ResNet-(6n+2) for 3x32x32 images: conv3x3 3->16, BN, ReLU; three stages of n blocks
    with 16, 32, 64 channels (stride 2 at the first block of stages 2 and 3); global
    average pool; Linear(64, classes)."""

    def __init__(self, n, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for stage, cout in enumerate((16, 32, 64)):
            for i in range(n):
                blocks.append(BasicBlock(cin, cout, 2 if stage > 0 and i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet_depth(model):
    """'resnet56' -> n = 9; None unless the name is resnet(6n+2) with n >= 1."""
    if not model.startswith("resnet") or not model[6:].isdigit():
        return None
    depth = int(model[6:])
    return (depth - 2) // 6 if depth >= 8 and (depth - 2) % 6 == 0 else None


def parse_args(argv):
    p = argparse.ArgumentParser(description="PyTorch peer of mtc-train: CIFAR ResNet or ResNet-50 on synthetic data")
    p.add_argument("--model", default="resnet56", help="resnet(6n+2): resnet20, resnet32, resnet56, ...; or resnet50")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--image_size", type=int, default=224, help="resnet50's input size")
    p.add_argument("--batch", type=int, default=64, help="samples per iteration")
    p.add_argument("--iterations", type=int, default=20, help="timed iterations")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations before them")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="synthetic", choices=["synthetic"])
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args(argv)  # exits with status 2 on a malformed flag
    n = 0 if a.model == "resnet50" else resnet_depth(a.model)
    if n is None:
        p.error(f"--model {a.model}: expected resnet50 or resnet(6n+2), e.g. resnet20 or resnet56")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no GPU")
    for name in ("batch", "iterations", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(a, name)}")
    if a.warmup < 0:
        p.error(f"--warmup must be at least 0, got {a.warmup}")
    return a, n


def main(argv):
    a, n = parse_args(argv)
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, torch imported
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(a.seed)

    dev = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    model = (ResNet50() if a.model == "resnet50" else CifarResNet(n)).to(dev)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    # Synthetic data: N(0, 1) images and uniform labels, made before the clock starts; a
    # few distinct batches in turn so that no step sees the previous step's batch.
    side = a.image_size if a.model == "resnet50" else 32
    batches = [(torch.randn(a.batch, 3, side, side, device=dev), torch.randint(0, 10, (a.batch,), device=dev))
               for _ in range(min(4, a.warmup + a.iterations))]

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()  # waits for the step, as mtc-train's loss read does

    for i in range(a.warmup):
        step(i)
    t0 = time.perf_counter()
    loss = float("nan")
    for i in range(a.iterations):
        loss = step(a.warmup + i)
    sec = (time.perf_counter() - t0) / a.iterations
    # PyTorch's CPU allocator keeps no statistics: peak_compute_bytes is how much the
    # process's peak resident set grew from just after `import torch` to the end (an
    # upper bound: parameters, optimiser state, data, activations and malloc's caching).
    rss_end = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = (rss_end - rss_start) * 1024
    if a.device == "cuda":  # the caching allocator's own count: live tensors at their peak
        peak = torch.cuda.max_memory_allocated()
    print(f"torch {torch.__version__}: {a.model} ({sum(p.numel() for p in model.parameters())} "
          f"parameters), {torch.get_num_threads()} threads, oneDNN "
          f"{'on' if torch.backends.mkldnn.is_available() else 'off'}, peak RSS {rss_end / 1024:.0f} MiB",
          file=sys.stderr)
    print(f"summary model={a.model} batch={a.batch} iterations={a.iterations} "
          f"sec_per_iter={sec:.4f} samples_per_sec={a.batch / sec:.1f} final_loss={loss:.6f} "
          f"peak_compute_bytes={peak}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
