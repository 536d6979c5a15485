#!/usr/bin/python3
# PyTorch reference timings for benchmarks/conv_bench.cc: the conv and batch-norm shapes of
# CIFAR ResNet-56 (batch 64), forward + backward, and one whole training iteration.
# Run: /usr/bin/python3 benchmarks/conv_torch.py [threads]   (default 2 threads)
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

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
torch.set_num_threads(threads)
torch.manual_seed(0)
N = 64
# (name, C, OC, H, kernel, stride, pad, count in ResNet-56)
CONVS = [
    ("first 3->16 @32", 3, 16, 32, 3, 1, 1, 1),
    ("3x3 16->16 @32", 16, 16, 32, 3, 1, 1, 18),
    ("3x3 s2 16->32 @32", 16, 32, 32, 3, 2, 1, 1),
    ("1x1 s2 16->32 @32", 16, 32, 32, 1, 2, 0, 1),
    ("3x3 32->32 @16", 32, 32, 16, 3, 1, 1, 17),
    ("3x3 s2 32->64 @16", 32, 64, 16, 3, 2, 1, 1),
    ("1x1 s2 32->64 @16", 32, 64, 16, 1, 2, 0, 1),
    ("3x3 64->64 @8", 64, 64, 8, 3, 1, 1, 17),
]
BNS = [("bn 16 @32", 16, 32, 19), ("bn 32 @16", 32, 16, 19), ("bn 64 @8", 64, 8, 19)]


def timeit(fn, reps):
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3  # ms


total = 0.0
print(f"PyTorch {torch.__version__}, {threads} threads, batch {N}; best of runs, ms")
print(f"{'shape':24s} {'fwd':>8s} {'bwd_data':>9s} {'bwd_wt':>8s} {'sum':>8s} {'x count':>8s}")
for name, c, oc, h, k, s, p, count in CONVS:
    x = torch.randn(N, c, h, h)
    w = torch.randn(oc, c, k, k)
    y = F.conv2d(x, w, None, s, p)
    dy = torch.randn_like(y)
    # The backward kernels themselves, as autograd calls them (oneDNN through ideep).
    def bwd(mask):
        return torch.ops.aten.convolution_backward(dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask)
    fwd = timeit(lambda: F.conv2d(x, w, None, s, p), 10)
    bd = timeit(lambda: bwd([True, False, False]), 10)
    bw = timeit(lambda: bwd([False, True, False]), 10)
    tot = fwd + bd + bw
    total += tot * count
    print(f"{name:24s} {fwd:8.3f} {bd:9.3f} {bw:8.3f} {tot:8.3f} {tot * count:8.2f}")
for name, c, h, count in BNS:
    x = torch.randn(N, c, h, h)
    gamma, beta, rm, rv = torch.ones(c), torch.zeros(c), torch.zeros(c), torch.ones(c)
    y, save_mean, save_invstd = torch.native_batch_norm(x, gamma, beta, rm, rv, True, 0.1, 1e-5)
    dy = torch.randn_like(y)
    fwd = timeit(lambda: torch.native_batch_norm(x, gamma, beta, rm, rv, True, 0.1, 1e-5), 20)
    bwd = timeit(lambda: torch.ops.aten.native_batch_norm_backward(dy, x, gamma, rm, rv, save_mean, save_invstd, True,
                                                                   1e-5, [True, True, True]), 20)
    total += (fwd + bwd) * count
    print(f"{name:24s} {fwd:8.3f} {bwd:9.3f} {'':8s} {fwd + bwd:8.3f} {(fwd + bwd) * count:8.2f}")
print(f"conv+bn total over ResNet-56: {total:.1f} ms")


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.sc = None
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.sc is None else self.sc(x)))


class ResNet56(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.b = nn.BatchNorm2d(16)
        layers, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(9):
                layers.append(Block(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.b(self.c(x)))
        x = self.layers(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


model = ResNet56()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x = torch.randn(N, 3, 32, 32)
lbl = torch.randint(0, 10, (N,))


def step():
    opt.zero_grad()
    F.cross_entropy(model(x), lbl).backward()
    opt.step()


print(f"ResNet-56 training iteration (fwd+bwd+SGD): {timeit(step, 5):.1f} ms")
