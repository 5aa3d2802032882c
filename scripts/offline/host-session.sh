#!/usr/bin/env bash
# One device session on the GPU host, in phases so each fits a call: build | test | bench | fmnist.
# Logs and JSON go to OUTDIR. Used for the figures in bench/results/.
set -uo pipefail
phase=$1 out=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
mkdir -p "$out"
source .gpu-deps/install-debs.sh > /dev/null
T=build/apps/trainer/trainer
case "$phase" in
  build)
    nvidia-smi > "$out/nvidia-smi.txt" 2>&1
    (time scripts/offline/build-on-host.sh) > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
    $T --version | tee "$out/version.txt"
    ;;
  test)
    (cd build && ctest --output-on-failure -j 8 2>&1) > "$out/ctest.log"; rc=$?
    grep -E "tests passed|tests failed|Failed|SKIP" "$out/ctest.log" | tail -20
    (cd build && ctest -L gpu --output-on-failure 2>&1 | tail -5) | tee "$out/ctest_gpu.log"
    exit $rc
    ;;
  bench)
    for w in "resnet50 bf16" "resnet50 fp16" "vit_base_patch16_224 bf16"; do
      set -- $w
      NO_COMPILE=${NO_COMPILE:-0} scripts/bench.sh "$out/bench" "$1" "$2" 2>&1 | tail -3
    done
    ;;
  fmnist)
    $T --config configs/fashion_mnist.yaml --set data.root="$TRAINER_FMNIST" --set run.out_dir="$out/runs" 2>&1 \
      | tee "$out/fmnist.log" | grep -E "done in|trained|error"
    ;;
esac
