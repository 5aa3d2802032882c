#!/usr/bin/env bash
# The benchmark suite: trainer against PyTorch on this host, every figure from this one run.
# usage: scripts/benchmark.sh quick|full OUTDIR [SECTION ...]
#   quick (about 8 minutes on one H200): the training step of ResNet-50 bf16 and fp16 and ViT-B/16 bf16 (trainer,
#     PyTorch eager, torch.compile; bs 256, 224 px, synthetic batch on the GPU); the input pipeline alone on an
#     ImageNet-like JPEG set it makes from photographs (CPU decode, GPU decode, the torch DataLoader with 16
#     workers); ResNet-50 end to end from those JPEGs with the default settings, against its synthetic speed.
#   full: quick plus two repeats of each training step (the report takes the median), ResNet-18/34/101 and
#     ViT-S/16, ResNet-18 end to end, pipeline img/s against decode threads (1-16) and training img/s and peak
#     memory against batch size (64-512).
#   SECTIONS (default: all of the mode's): train pipeline e2e [full: models threads batch]
# Each measurement writes OUTDIR/raw/<name>.json and is skipped when that file exists, so a suite cut short
# (one call's time limit) goes on where it stopped when run again. At the end scripts/benchmark_report.py writes
# OUTDIR/results.json (every figure with its environment), report.md (the table) and report.png (the bars).
# Environment: PYTHON (default .venv/bin/python3, else python3), PHOTOS (photographs for the JPEG set; default
# .gpu-deps/photos or Debian's mate-backgrounds), STEPS (timed training steps, default 60).
set -uo pipefail
mode=${1:-}; out=${2:-}
[[ "$mode" == quick || "$mode" == full ]] && [ -n "$out" ] || { sed -n 2,17p "$0"; exit 2; }
shift 2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mkdir -p "$out/raw" "$out/logs"
out=$(cd "$out" && pwd)
sections=("$@")
[ ${#sections[@]} -gt 0 ] || { sections=(train pipeline e2e); [ "$mode" = full ] && sections+=(models threads batch); }

# ---- build if needed (the offline host: its .gpu-deps recipe) ----
[ -f .gpu-deps/install-debs.sh ] && source .gpu-deps/install-debs.sh > /dev/null
T=build/apps/trainer/trainer
if [ ! -x "$T" ]; then
  echo "benchmark: building trainer (log: $out/logs/build.log)"
  if [ -f .gpu-deps/install-debs.sh ]; then scripts/offline/build-on-host.sh; else scripts/setup.sh && scripts/build.sh; fi \
    > "$out/logs/build.log" 2>&1 || { tail -30 "$out/logs/build.log"; exit 1; }
fi
py=${PYTHON:-}
[ -n "$py" ] || { [ -x .venv/bin/python3 ] && py=.venv/bin/python3 || py=python3; }
steps=${STEPS:-60}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/logs/gpu.txt" 2>&1 || true
"$T" --version > "$out/logs/version.txt" 2>&1
git rev-parse --short HEAD > "$out/logs/commit.txt" 2>/dev/null || true

# run NAME CMD...: the measurement NAME unless its JSON is there; CMD writes $json; its output goes to logs/NAME.log
run() {
  local name=$1; shift
  json="$out/raw/$name.json"
  [ -s "$json" ] && return 0
  local t0=$SECONDS
  if "$@" > "$out/logs/$name.log" 2>&1 && [ -s "$json" ]; then
    printf '  %-44s %4ds\n' "$name" $((SECONDS - t0))
  else
    printf '  %-44s FAILED (%s)\n' "$name" "$out/logs/$name.log"; rm -f "$json"
  fi
}
# the training step of MODEL PRECISION [BATCH] [SUFFIX]: trainer, PyTorch eager, torch.compile
train_step() {
  local model=$1 prec=$2 bs=${3:-256} sfx=${4:-} cl=true cl_flag=--channels-last
  case "$model" in vit*) cl=false; cl_flag= ;; esac
  local tag="train_${model}_${prec}_bs${bs}"
  run "${tag}_trainer$sfx" "$T" bench --config configs/bench.yaml --set model.name="$model" \
    --set train.precision="$prec" --set data.batch_size="$bs" --set bench.steps="$steps" \
    --set model.channels_last=$cl --out "$out/raw/${tag}_trainer$sfx.json"
  [ "${TRAINER_ONLY:-0}" = 1 ] && return 0
  for m in eager compile; do
    local flag=; [ $m = compile ] && flag=--compile
    run "${tag}_${m}$sfx" "$py" scripts/bench_pytorch.py --model "$model" --precision "$prec" --batch-size "$bs" \
      --steps "$steps" $cl_flag $flag --out "$out/raw/${tag}_${m}$sfx.json"
  done
}
jpeg_set() {
  [ -d data/imagenet_like/train ] && return 0
  local photos=${PHOTOS:-}
  [ -n "$photos" ] || for d in .gpu-deps/photos /usr/share/backgrounds/mate/nature; do [ -d "$d" ] && photos=$d && break; done
  [ -n "$photos" ] || { echo "benchmark: no photographs for the JPEG set (set PHOTOS)"; return 1; }
  "$py" scripts/make_imagenet_like.py "$photos" data/imagenet_like --train 4000 --val 500 > "$out/logs/jpeg_set.txt"
}
data_args=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=40)
e2e_args=(--config configs/imagenet_like.yaml --set data.eval_split= --set bench.data=pipeline
          --set bench.warmup_steps=20 --set bench.steps="$steps")

for s in "${sections[@]}"; do
  echo "benchmark: $s"
  case "$s" in
    train)
      for r in "" _2 _3; do
        [ -n "$r" ] && [ "$mode" = quick ] && continue
        train_step resnet50 bf16 256 "$r"; train_step resnet50 fp16 256 "$r"; train_step vit_base_patch16_224 bf16 256 "$r"
      done ;;
    pipeline)
      jpeg_set || continue
      run pipeline_cpu "$T" bench-data "${data_args[@]}" --set data.decode=cpu --out "$out/raw/pipeline_cpu.json"
      run pipeline_gpu "$T" bench-data "${data_args[@]}" --set data.decode=gpu --set data.workers=4 \
        --out "$out/raw/pipeline_gpu.json"
      run pipeline_torch_dataloader "$py" scripts/bench_torch_dataloader.py data/imagenet_like/train --workers 16 \
        --out "$out/raw/pipeline_torch_dataloader.json" ;;
    e2e)
      jpeg_set || continue
      train_step resnet50 bf16 256 ""   # the synthetic speed it is compared with
      run e2e_resnet50_bf16_trainer "$T" bench "${e2e_args[@]}" --out "$out/raw/e2e_resnet50_bf16_trainer.json"
      if [ "$mode" = full ]; then
        TRAINER_ONLY=1 train_step resnet18 bf16 256 ""
        run e2e_resnet18_bf16_trainer "$T" bench "${e2e_args[@]}" --set model.name=resnet18 \
          --out "$out/raw/e2e_resnet18_bf16_trainer.json"
      fi ;;
    models)
      for m in resnet18 resnet34 resnet101 vit_small_patch16_224; do train_step $m bf16 256; done ;;
    threads)
      jpeg_set || continue
      for n in 1 2 4 8 14 16; do
        run "threads_cpu_${n}" "$T" bench-data "${data_args[@]}" --set data.decode=cpu --set data.workers=$n \
          --out "$out/raw/threads_cpu_${n}.json"
      done ;;
    batch)
      for b in 64 128 256 384 512; do
        TRAINER_ONLY=1 train_step resnet50 bf16 $b ""
        run "train_resnet50_bf16_bs${b}_eager" "$py" scripts/bench_pytorch.py --model resnet50 --precision bf16 \
          --batch-size $b --steps "$steps" --channels-last --out "$out/raw/train_resnet50_bf16_bs${b}_eager.json"
      done ;;
    *) echo "benchmark: unknown section '$s' (train pipeline e2e models threads batch)"; exit 2 ;;
  esac
done
"$py" scripts/benchmark_report.py "$out" && echo "benchmark: $out/report.md"
