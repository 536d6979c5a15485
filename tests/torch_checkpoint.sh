#!/usr/bin/env bash
# PyTorch's ResNet-50 weights into mtc and back (issue 19): torchvision's resnet50 state
# dict, written as safetensors by tests/torch_checkpoint.py, starts an mtc-train run
# (--weights) of one iteration at learning rate 0 that saves its checkpoint; that file
# loads into torchvision with only the batch counters missing and only optimizer state
# unexpected, every parameter bit for bit torchvision's. Skipped (status 77, ctest's
# SKIP_RETURN_CODE) when /usr/bin/python3 lacks torch or torchvision (scripts/deps.sh
# --torch installs Debian's).
# Usage: torch_checkpoint.sh MTC_TRAIN
set -euo pipefail
train=$1
python=${PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import torch, torchvision' 2>/dev/null; then
  echo "SKIP: $python has no torch or torchvision (scripts/deps.sh --torch installs them)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
here=$(dirname "$0")
"$python" "$here/torch_checkpoint.py" write "$tmp/torch.safetensors"
"$train" --model=resnet50 --num_classes=10 --image_size=32 --batch=2 --iterations=1 --warmup=0 --threads=2 \
  --memory=1GiB --lr=0 --momentum=0 --weight_decay=0 --weights="$tmp/torch.safetensors" \
  --save="$tmp/mtc.safetensors" >"$tmp/train.txt" 2>&1 || { cat "$tmp/train.txt"; echo "FAIL: mtc-train"; exit 1; }
grep -E '^(weights|checkpoint):' "$tmp/train.txt"
"$python" "$here/torch_checkpoint.py" check "$tmp/torch.safetensors" "$tmp/mtc.safetensors"
