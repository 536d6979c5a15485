#!/usr/bin/env bash
# Where a GPU iteration's time goes, for mtc-train beside PyTorch (benchmarks/torch_peer.py):
# ResNet-50 by default. For each: seconds per iteration at three batches (a time that
# does not scale with the batch is host-side overhead: launches, allocation, waits), then,
# under Nsight Systems when `nsys` is found, the GPU kernels' total time per iteration
# against the wall time (the share the GPU is busy) and the 25 kernels that take the most
# time. Needs a GPU and the binaries of scripts/gpu-check.sh --prepare's bundle, or
# MTC_TRAIN pointing at an mtc-train that runs there.
#
#   benchmarks/gpu_profile.sh OUTDIR [--bundle DIR] [--model resnet50] [--batches "32 64 128"]
#
# OUTDIR gets every log and the nsys reports. Exit: 0 done; 2 usage error, no GPU, or a run failed.
set -euo pipefail

usage() { echo "usage: $0 OUTDIR [--bundle build-gpu-bundle] [--model resnet50] [--image_size 224] [--batches \"32 64 128\"] [--python python3]"; }
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { usage >&2; exit 2; }
out=$1; shift
bundle=build-gpu-bundle model=resnet50 image_size=224 batches="32 64 128" python=python3
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle|--model|--image_size|--batches|--python)
      [ $# -ge 2 ] || { echo "gpu_profile.sh: $1 needs a value" >&2; exit 2; }
      v=${1#--}; declare "$v=$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_profile.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_profile.sh: no GPU found (nvidia-smi lists none): this needs one" >&2
  exit 2
fi

# mtc-train: $MTC_TRAIN, else the bundle unpacked under /tmp with its libraries.
if [ -n "${MTC_TRAIN:-}" ]; then
  mtc=("$MTC_TRAIN")
else
  [ -r "$bundle/mtc-gpu-bundle.tar.xz" ] || { echo "gpu_profile.sh: no $bundle/mtc-gpu-bundle.tar.xz (scripts/gpu-check.sh --prepare) and no MTC_TRAIN" >&2; exit 2; }
  w=$(mktemp -d /tmp/mtc-gpu-profile.XXXXXX)
  trap 'rm -rf "$w"' EXIT
  tar -C "$w" -xJf "$bundle/mtc-gpu-bundle.tar.xz"
  mtc=(env "LD_LIBRARY_PATH=$w/mtc-gpu-bundle/lib" "$w/mtc-gpu-bundle/bin/mtc-train")
fi
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -n 1 || true)

field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }
common=(--model="$model" --image_size="$image_size")

echo "== $model at ${image_size}px: seconds per iteration by batch (mtc: least of the timed; torch: mean) =="
printf '%6s %12s %12s %8s\n' batch "mtc s/iter" "torch s/iter" ratio
for b in $batches; do
  "${mtc[@]}" --device=cuda "${common[@]}" --batch="$b" --iterations=10 --warmup=3 --log_every=1000 \
    >"$out/mtc-b$b.log" 2>&1 || { echo "mtc-train batch $b failed:"; tail -n 20 "$out/mtc-b$b.log"; exit 2; }
  "$python" benchmarks/torch_peer.py --device=cuda "${common[@]}" --batch="$b" --iterations=10 --warmup=3 \
    >"$out/torch-b$b.log" 2>&1 || { echo "torch_peer.py batch $b failed:"; tail -n 20 "$out/torch-b$b.log"; exit 2; }
  m=$(field "$(grep '^summary ' "$out/mtc-b$b.log" | tail -n 1)" min_sec_per_iter)
  t=$(field "$(grep '^summary ' "$out/torch-b$b.log" | tail -n 1)" sec_per_iter)
  awk -v b="$b" -v m="$m" -v t="$t" 'BEGIN { printf "%6d %12.4f %12.4f %8.3f\n", b, m, t, m / t }'
done

ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
if [ -z "$nsys" ] && [ -n "$ncu" ]; then
  # Nsight Compute times every kernel of one iteration (batch 64, no warm-up), one at a
  # time: the GPU time per kernel is exact, the wall time is not (each kernel is replayed).
  echo
  echo "== Nsight Compute ($ncu): every kernel of one iteration, batch 64, by kernel name =="
  for who in mtc torch; do
    if [ $who = mtc ]; then cmd=("${mtc[@]}" --device=cuda "${common[@]}" --batch=64 --iterations=1 --warmup=0 --log_every=1000)
    else cmd=("$python" benchmarks/torch_peer.py --device=cuda "${common[@]}" --batch=64 --iterations=1 --warmup=0); fi
    timeout 150 "$ncu" --target-processes all --metrics gpu__time_duration.sum --csv --print-units base \
      "${cmd[@]}" >"$out/ncu-$who.csv" 2>"$out/ncu-$who.log" || { echo "ncu on $who failed:"; tail -n 20 "$out/ncu-$who.log"; continue; }
    echo "-- $who"
    python3 - "$out/ncu-$who.csv" <<'EOF2'
import csv, sys, collections
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
tot = collections.Counter(); n = collections.Counter()
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    tot[r["Kernel Name"]] += v; n[r["Kernel Name"]] += 1
total = sum(tot.values())
print(f"   kernels: {total / 1e6:.2f} ms GPU time in {sum(n.values())} launches, {len(tot)} kinds")
print(f"   {'ms':>8} {'calls':>6} {'share':>6}  kernel")
for k, v in tot.most_common(30):
    print(f"   {v / 1e6:8.2f} {n[k]:6d} {100 * v / total:5.1f}%  {k[:120]}")
EOF2
  done
  exit 0
fi
if [ -z "$nsys" ]; then
  echo "nsys not found: no kernel table"
  exit 0
fi
echo
echo "== Nsight Systems ($nsys), batch 64, 3 warm-up + 5 timed iterations each =="
iters=8
for who in mtc torch; do
  if [ $who = mtc ]; then cmd=("${mtc[@]}" --device=cuda "${common[@]}" --batch=64 --iterations=5 --warmup=3 --log_every=1000)
  else cmd=("$python" benchmarks/torch_peer.py --device=cuda "${common[@]}" --batch=64 --iterations=5 --warmup=3); fi
  "$nsys" profile --trace=cuda --sample=none --cpuctxsw=none --force-overwrite=true -o "$out/$who" "${cmd[@]}" \
    >"$out/nsys-$who.log" 2>&1 || { echo "nsys on $who failed:"; tail -n 20 "$out/nsys-$who.log"; continue; }
  "$nsys" stats --report cuda_gpu_kern_sum --format csv --output "$out/$who" "$out/$who.nsys-rep" >/dev/null 2>&1 || true
  csv=$(ls "$out/$who"*cuda_gpu_kern_sum*.csv 2>/dev/null | head -n 1)
  [ -n "$csv" ] || { echo "$who: no kernel summary"; continue; }
  wall=$(field "$(grep '^summary ' "$out/nsys-$who.log" | tail -n 1)" sec_per_iter)
  echo "-- $who: wall $wall s/iter (timed iterations, under nsys)"
  # CSV: Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
  python3 - "$csv" "$iters" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
iters = int(sys.argv[2])
total = sum(float(r["Total Time (ns)"]) for r in rows)
print(f"   kernels: {total / 1e6 / iters:.2f} ms per iteration over all {iters} (warm-up included), {len(rows)} kinds")
print(f"   {'ms/iter':>8} {'calls/iter':>10} {'share':>6}  kernel")
for r in rows[:25]:
    t = float(r["Total Time (ns)"])
    print(f"   {t / 1e6 / iters:8.2f} {int(r['Instances']) / iters:10.1f} {100 * t / total:5.1f}%  {r['Name'][:110]}")
EOF
done
