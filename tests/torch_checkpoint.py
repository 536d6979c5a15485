#!/usr/bin/python3
# torch_checkpoint.sh's PyTorch side: torchvision's ResNet-50 and safetensors files read
# and written by this file's own code, from the format's specification (Debian has no
# Python safetensors package).
#   torch_checkpoint.py write OUT           torchvision resnet50(num_classes=10), seeded, its
#                                           state_dict (with num_batches_tracked) to OUT
#   torch_checkpoint.py check TORCH MTC     MTC (saved by mtc-train --weights TORCH --lr 0)
#                                           loads into torchvision with strict=False: the only
#                                           missing keys are the batch counters, the only
#                                           unexpected ones optimizer state, and every
#                                           parameter equals TORCH's bit for bit
# Exit 0 PASS, 1 FAIL, 2 usage.
import json
import struct
import sys

import torch
import torchvision

DTYPES = {"F32": torch.float32, "I64": torch.int64, "I32": torch.int32}
NAMES = {v: k for k, v in DTYPES.items()}


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:end]), dtype=DTYPES[e["dtype"]]) if end > b else \
            torch.empty(0, dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out


def write(path, tensors):
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        b = t.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        chunks.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        torch.manual_seed(0)
        net = torchvision.models.resnet50(num_classes=10)
        # Batch norm's running statistics away from their initial 0 and 1.
        net.train()
        with torch.no_grad():
            net(torch.randn(4, 3, 32, 32))
        write(sys.argv[2], net.state_dict())
        print(f"wrote {len(net.state_dict())} tensors of torchvision's resnet50 to {sys.argv[2]}")
        return 0
    if len(sys.argv) == 4 and sys.argv[1] == "check":
        theirs, ours = read(sys.argv[2]), read(sys.argv[3])
        net = torchvision.models.resnet50(num_classes=10)
        r = net.load_state_dict(ours, strict=False)
        bad_missing = [k for k in r.missing_keys if not k.endswith("num_batches_tracked")]
        bad_extra = [k for k in r.unexpected_keys if not k.startswith("optimizer.")]
        params = dict(net.named_parameters())
        differ = [k for k, p in params.items() if not torch.equal(p.detach(), theirs[k])]
        print(f"mtc's file: {len(ours)} tensors; into torchvision: {len(r.missing_keys)} missing "
              f"({len(bad_missing)} other than num_batches_tracked), {len(r.unexpected_keys)} unexpected "
              f"({len(bad_extra)} other than optimizer state); {len(params) - len(differ)} of {len(params)} "
              f"parameters equal to torchvision's bit for bit")
        # torch's batch norm fills a missing num_batches_tracked itself, so it may list none.
        ok = not bad_missing and not bad_extra and not differ and len(ours) >= len(params)
        print("PASS" if ok else f"FAIL: missing {bad_missing[:5]}, unexpected {bad_extra[:5]}, differ {differ[:5]}")
        return 0 if ok else 1
    print(__doc__ or "usage: torch_checkpoint.py write OUT | check TORCH MTC", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
