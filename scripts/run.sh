#!/usr/bin/env bash
# scripts/run.sh [MTC-TRAIN FLAGS]: installs what is missing, builds mtc (Release, in build/)
# and runs the default training job, ResNet-20 at batch 64 for 50 iterations on synthetic
# data. Extra flags go to mtc-train and override the defaults (e.g. --model resnet56).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
mtc_install_deps
mtc_build build -DCMAKE_BUILD_TYPE=Release
if [ ! -x build/launch/mtc-train ]; then
  echo "run.sh: the build made no build/launch/mtc-train (is launch/mtc_train.cc there?)" >&2
  exit 1
fi
exec build/launch/mtc-train --model resnet20 --batch 64 --iterations 50 --data synthetic "$@"
