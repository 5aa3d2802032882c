#!/usr/bin/env bash
# Runs `trainer bench` and the PyTorch reference (eager, and torch.compile unless NO_COMPILE=1) on the same
# workload in one go, writes the JSON of each into OUTDIR and prints the ratios.
# usage: scripts/bench.sh OUTDIR MODEL PRECISION [BATCH] [IMAGE] [STEPS]
# EXTRA="key=value ..." adds --set overrides to the trainer run (e.g. train.cuda_graph=true), SUFFIX tags its JSON;
# SKIP_PYTORCH=1 runs the trainer only (the reference already ran in this call).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$1 model=$2 prec=$3 bs=${4:-256} img=${5:-224} steps=${6:-100}
py=${PYTHON:-python3}
trainer=${TRAINER:-$root/build/apps/trainer/trainer}
mkdir -p "$out"
tag="${model}_${prec}_bs${bs}"
extra=()
for kv in ${EXTRA:-}; do extra+=(--set "$kv"); done
cl=true; cl_flag=--channels-last
case "$model" in vit*) cl=false; cl_flag= ;; esac
"$trainer" bench --config "$root/configs/bench.yaml" --set model.name="$model" --set train.precision="$prec" \
  --set data.batch_size="$bs" --set data.image_size="$img" --set bench.steps="$steps" \
  --set model.channels_last=$cl "${extra[@]}" --out "$out/${tag}_trainer${SUFFIX:-}.json" > /dev/null
[ "${SKIP_PYTORCH:-0}" = "1" ] || "$py" "$root/scripts/bench_pytorch.py" --model "$model" --precision "$prec" --batch-size "$bs" --image-size "$img" \
  --steps "$steps" $cl_flag --out "$out/${tag}_pytorch_eager.json" > /dev/null
if [ "${NO_COMPILE:-0}" != "1" ] && [ "${SKIP_PYTORCH:-0}" != "1" ]; then
  "$py" "$root/scripts/bench_pytorch.py" --model "$model" --precision "$prec" --batch-size "$bs" --image-size "$img" \
    --steps "$steps" $cl_flag --compile --out "$out/${tag}_pytorch_compile.json" > /dev/null
fi
"$py" - "$out" "$tag" "${SUFFIX:-}" <<'PY'
import json, os, sys
out, tag, suffix = sys.argv[1:4]
ours = json.load(open(f"{out}/{tag}_trainer{suffix}.json"))
line = f"{tag}{suffix}: trainer {ours['img_per_s']:.0f} img/s (peak {ours['peak_mem_gib']:.1f} GiB)"
for mode in ("eager", "compile"):
    p = f"{out}/{tag}_pytorch_{mode}.json"
    if os.path.exists(p):
        ref = json.load(open(p))
        line += (f" | pytorch {mode} {ref['img_per_s']:.0f} img/s (peak {ref['peak_mem_gib']:.1f} GiB)"
                 f" -> ratio {ours['img_per_s'] / ref['img_per_s']:.3f}")
print(line)
PY
