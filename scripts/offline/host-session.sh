#!/usr/bin/env bash
# One device session on the GPU host, in phases so each fits a call:
#   build | test | gputest | bench | fmnist | data (make the JPEG set, bench-data vs torch DataLoader) | e2e
#   obs (the JPEG run's step split, verdicts and a profile; bench from the pipeline vs synthetic)
#   engine (ViT-B / ResNet-50 eager and CUDA-graph steps against PyTorch eager)
#   pipeline (every input path alone, the torch DataLoader before and after in the same call)
#   gpudecode (data.decode gpu vs cpu, pipeline alone and ResNet-50 end to end)
#   auto (data.decode auto deciding while training: ResNet-50 end to end with auto, default threads and 4, against
#     cpu, gpu and synthetic in the same call; bench-data with auto)
#   threads (GPU decode with 3 read threads + the producer, 4 data threads in all, and with 4 + 1, against
#     synthetic; each process's CPU time)
#   cpudata (issue 4's figures: the CPU pipeline alone, 14 and 16 threads, between two runs of both DataLoaders)
#   restart (the same from the folder, byte-for-byte shards and restart-marker shards; GPU decode and ResNet-50
#     end to end from restart shards)
#   ratio (issue 4's ratio with both sides in steady state: long runs, the DataLoader not draining at epoch ends;
#     14 and 16 workers / threads; the earlier method once for comparison)
#   ratio_shrunk (the same with shards shrunk by pack --max-side 320 / 384, against the DataLoader on the originals)
#   gains (DCT scaling and crop-only decoding each switched off, from the folder and from restart-marker shards)
#   e2e_restart (ResNet-50 end to end from restart-marker shards between two synthetic runs)
#   shrunk (shards shrunk with pack --max-side 320, with and without restart markers, against the DataLoader on
#     the originals and on the same shrunk images)
#   autofit (data.decode auto in a training run, 4 epochs with the evaluation at the end: 4 threads, then the default)
#   dtype (data.dtype: the batch in bfloat16 against float32, end to end and the pipeline alone)
#   issue9 (the GPU decode issue's figures: pipeline alone vs both DataLoader baselines, then e2e100)
#   graph (train.cuda_graph fed by the JPEG pipeline, GPU and CPU decode, against eager and synthetic)
#   gpuprof (training steps profiled with GPU decode and with CPU decode)
#   gpucrop (crop-only decode on the engines vs whole images, the decoder's submission choices, both DataLoader
#     baselines, ResNet-50 end to end)
#   autoaug (RandAugment / TrivialAugmentWide cost, against the DataLoader with torchvision's)
#   interp (train with trainer's resize; evaluate with trainer's and with torchvision's)
#   shards (pack, bench-data from folder / shards / with device augmentations vs the DataLoader, e2e from shards)
#   hardening (SIGTERM twice from GNU timeout on a GPU run; the step against PyTorch eager after issue 23's changes)
#   fusedbn (issue 24: the fused batch-norm and max-pool harnesses and GPU tests, ResNet-50 bf16 and fp16 against
#     eager and torch.compile)
#   bnprof (issue 24: ResNet-50 bf16 steps profiled fused, with model.fused_norm off, and PyTorch under torch.compile)
#   stopdist (a rank under `trainer launch` on NCCL stops within about a second of SIGTERM, whatever the log interval)
# Logs and JSON go to OUTDIR. Used for the figures in bench/results/.
set -uo pipefail
phase=$1 out=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
mkdir -p "$out"
source .gpu-deps/install-debs.sh > /dev/null
T=build/apps/trainer/trainer
# the ImageNet-like JPEG set (made once per host) and the folder for JSON results
jpeg_set() {
  [ -d data/imagenet_like ] || python3 scripts/make_imagenet_like.py .gpu-deps/photos data/imagenet_like \
    --train 4000 --val 500 > "$out/dataset.txt"
  mkdir -p "$out/bench"
}
# both torch DataLoader baselines: uint8 out (normalised on the GPU), and torchvision's ToTensor + Normalize in the
# workers; $1: the ImageFolder, $2: the tail of the JSON names, then the script's arguments
dataloader_pair() {
  local root=$1 tail=$2
  shift 2
  for norm in "" --normalize-in-workers; do
    python3 scripts/bench_torch_dataloader.py "$root" $norm "$@" \
      --out "$out/bench/data_torch_dataloader${norm:+_normalize_in_workers}$tail.json" 2>&1 \
      | grep img_per_s | sed "s/^/DataLoader$tail${norm:+ normalised in workers}: /"
  done
}
# 16 workers, the method of the figures before 2026-12-01 (5 + 40 batches, a new iterator per epoch; the ratio
# phases have the steady state); $1: a suffix for the JSON names, $2: another ImageFolder
dataloaders() {
  dataloader_pair "${2:-data/imagenet_like/train}" "${1:-}" --workers 16 --batches 40 --warmup 5 --epoch-iterators
}
# steady state (the script's defaults) on the set's originals; $1: workers, $2: a suffix for the JSON names, then
# extra arguments for the script
dl() {
  local w=$1 sfx=$2
  shift 2
  dataloader_pair data/imagenet_like/train "_${w}workers$sfx" --workers "$w" "$@"
}
# ResNet-50 end to end from the JPEG set: 20 warm-up + 100 timed steps (e2e100); GPU decode with 4 read threads
e2e100=(--config configs/imagenet_like.yaml --set data.eval_split= --set bench.warmup_steps=20 --set bench.steps=100)
gpudec=(--set data.decode=gpu --set data.workers=4 --set bench.data=pipeline)
# the pipeline alone (bench-data), GPU decode with 4 read threads, 100 batches
gpudata=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=100 --set data.decode=gpu --set data.workers=4)
# one `trainer bench` run named $1: the phase's e2e=(...) arguments, then the rest
erun() { local name=$1; shift; $T bench "${e2e[@]}" "$@" --out "$out/bench/$name.json" 2>&1 \
  | grep -E "bench resnet50|error|decode auto" | sed "s/^/$name: /"; }
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
  engine)  # ViT-B and ResNet-50 against PyTorch eager in this call, then the same with the step as a CUDA graph
    for w in "vit_base_patch16_224 bf16" "resnet50 bf16" "resnet50 fp16"; do
      set -- $w
      NO_COMPILE=1 scripts/bench.sh "$out/bench" "$1" "$2" 2>&1 | tail -1
      SKIP_PYTORCH=1 EXTRA=train.cuda_graph=true SUFFIX=_graph scripts/bench.sh "$out/bench" "$1" "$2" 2>&1 | tail -1
    done
    ;;
  shards)  # pack the JPEG set into tar shards (as is, and shrunk to 320 px), bench-data from folder / shards /
           # with device augmentations, the torch DataLoader in the same call, ResNet-50 end to end from shards
    jpeg_set
    TIMEFORMAT="%R s wall"
    { time $T pack --src data/imagenet_like/train --out data/shards/train;
      time $T pack --src data/imagenet_like/train --out data/shards320/train --max-side 320; } > "$out/pack.txt" 2>&1
    cat "$out/pack.txt"
    common=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=40)
    $T bench-data "${common[@]}" --out "$out/bench/data_folder.json" 2>&1 | grep bench-data
    $T bench-data "${common[@]}" --set data.source=shards --set data.root=data/shards \
      --out "$out/bench/data_shards.json" 2>&1 | grep bench-data
    $T bench-data "${common[@]}" --set data.source=shards --set data.root=data/shards320 \
      --out "$out/bench/data_shards320.json" 2>&1 | grep bench-data
    $T bench-data "${common[@]}" --set 'data.jitter=[0.4,0.4,0.4,0.1]' --set data.erase_prob=0.25 \
      --out "$out/bench/data_folder_jitter_erase.json" 2>&1 | grep bench-data
    python3 scripts/bench_torch_dataloader.py data/imagenet_like/train --workers 16 --batches 40 --warmup 5 --epoch-iterators \
      --out "$out/bench/data_torch_dataloader.json" 2>&1 | grep img_per_s
    $T bench --config configs/imagenet_like.yaml --set data.source=shards --set data.root=data/shards --set data.eval_split= \
      --set bench.data=pipeline --set bench.warmup_steps=10 --set bench.steps=45 \
      --out "$out/bench/resnet50_bf16_pipeline_shards.json" 2>&1 | grep "bench resnet50"
    $T bench --config configs/imagenet_like.yaml --set bench.warmup_steps=10 --set bench.steps=45 \
      --out "$out/bench/resnet50_bf16_synthetic_trainer.json" 2>&1 | grep "bench resnet50"
    ;;
  gpudecode)  # data.decode gpu (nvJPEG) against the CPU pipeline in the same call, and ResNet-50 end to end
    jpeg_set
    common=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=40)
    $T bench-data "${common[@]}" --out "$out/bench/data_cpu.json" 2>&1 | grep bench-data
    $T bench-data "${common[@]}" --set data.workers=4 --out "$out/bench/data_cpu_4threads.json" 2>&1 | grep bench-data
    $T bench-data "${common[@]}" --set data.decode=gpu --set data.workers=4 --out "$out/bench/data_gpu.json" 2>&1 \
      | grep -E "bench-data|error"
    $T bench-data "${common[@]}" --set data.decode=auto --set data.workers=4 --out "$out/bench/data_auto.json" 2>&1 \
      | grep -E "auto|bench-data|error"
    python3 scripts/bench_torch_dataloader.py data/imagenet_like/train --workers 16 --batches 40 --warmup 5 --epoch-iterators \
      --out "$out/bench/data_torch_dataloader.json" 2>&1 | grep img_per_s
    $T bench --config configs/imagenet_like.yaml --set data.decode=gpu --set data.workers=4 --set data.eval_split= \
      --set bench.data=pipeline --set bench.warmup_steps=10 --set bench.steps=45 \
      --out "$out/bench/resnet50_bf16_pipeline_gpudecode.json" 2>&1 | grep -E "bench resnet50|error"
    $T bench --config configs/imagenet_like.yaml --set data.workers=4 --set data.eval_split= \
      --set bench.data=pipeline --set bench.warmup_steps=10 --set bench.steps=45 \
      --out "$out/bench/resnet50_bf16_pipeline_cpu4.json" 2>&1 | grep -E "bench resnet50|error"
    $T bench --config configs/imagenet_like.yaml --set bench.warmup_steps=10 --set bench.steps=45 \
      --out "$out/bench/resnet50_bf16_synthetic.json" 2>&1 | grep "bench resnet50"
    ;;
  gpucrop)  # data.crop_decode on the GPU path (nvJPEG regions) against whole-image decode, in one call
    jpeg_set
    common=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=${STEPS:-100})
    gpu=("${common[@]}" --set data.decode=gpu --set data.workers=4)
    run() { local name=$1; shift; "$@" --out "$out/bench/$name.json" 2>&1 | grep -E "bench-data|error" | sed "s/^/$name: /"; }
    for rep in 1 2 3; do  # interleaved repeats: their spread is the noise
      run data_gpu_crop_$rep $T bench-data "${gpu[@]}"
      run data_gpu_whole_$rep $T bench-data "${gpu[@]}" --set data.crop_decode=false
    done
    for rep in 1 2; do
      run data_cpu_$rep $T bench-data "${common[@]}" --set bench.steps=40
      run data_cpu_16threads_$rep $T bench-data "${common[@]}" --set bench.steps=40 --set data.workers=16
    done
    dataloaders
    e2e=(--config configs/imagenet_like.yaml --set data.eval_split= --set bench.warmup_steps=10 --set bench.steps=45)
    dec=("${gpudec[@]}")
    for rep in 1 2; do
      erun resnet50_bf16_synthetic_$rep
      erun resnet50_bf16_pipeline_gpudecode_$rep "${dec[@]}"
    done
    erun resnet50_bf16_pipeline_gpudecode_whole "${dec[@]}" --set data.crop_decode=false
    ;;
  e2e100)  # ResNet-50 bf16 end to end, 100 timed steps, three interleaved repeats: synthetic, GPU decode (4 read
            # threads), CPU decode (cores - 2 threads)
    jpeg_set
    e2e=("${e2e100[@]}")
    for rep in 1 2 3; do
      erun resnet50_bf16_synthetic_$rep
      erun resnet50_bf16_pipeline_gpudecode_$rep "${gpudec[@]}"
    done
    erun resnet50_bf16_pipeline_cpudecode --set bench.data=pipeline
    ;;
  auto)  # data.decode auto decides while training: ResNet-50 end to end with auto (default threads, and 4) against
         # cpu (default threads), gpu (4 threads) and synthetic, interleaved, two repeats; then bench-data with auto
    jpeg_set
    e2e=("${e2e100[@]}")
    pipe=(--set bench.data=pipeline)
    for rep in 1 2; do
      erun resnet50_bf16_synthetic_$rep
      erun resnet50_bf16_pipeline_auto_$rep "${pipe[@]}" --set data.decode=auto
      erun resnet50_bf16_pipeline_cpu_$rep "${pipe[@]}"
      erun resnet50_bf16_pipeline_auto_4threads_$rep "${pipe[@]}" --set data.decode=auto --set data.workers=4
      erun resnet50_bf16_pipeline_gpudecode_$rep "${gpudec[@]}"
    done
    $T bench-data "${gpudata[@]}" --set data.decode=auto --out "$out/bench/data_auto_4threads.json" 2>&1 \
      | grep -E "auto|bench-data|error"
    $T bench-data "${gpudata[@]}" --set data.decode=auto --set data.workers=-1 --out "$out/bench/data_auto.json" 2>&1 \
      | grep -E "auto|bench-data|error"
    ;;
  threads)  # issue 9's "at most 4 CPU threads for data": GPU decode with 3 read threads (+ the producer thread: 4 in
            # all) and with 4, against synthetic, three interleaved repeats; each process's CPU time (bash's time:
            # start-up included, so the difference to the synthetic run is what the data side used)
    jpeg_set
    e2e=("${e2e100[@]}")
    TIMEFORMAT="  process: user %U s, sys %S s, wall %R s"
    for rep in 1 2 3; do
      { time erun resnet50_bf16_synthetic_$rep; } 2>&1
      { time erun resnet50_bf16_pipeline_gpudecode_3threads_$rep "${gpudec[@]}" --set data.workers=3; } 2>&1
      { time erun resnet50_bf16_pipeline_gpudecode_$rep "${gpudec[@]}"; } 2>&1
    done
    ;;
  cpudata)  # issue 4's figures in one call: the CPU pipeline alone with the default 14 threads and with 16, two
            # interleaved repeats, between two runs of both torch DataLoader baselines (16 workers)
    jpeg_set
    common=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=60)
    dataloaders _before
    for rep in 1 2; do
      $T bench-data "${common[@]}" --out "$out/bench/data_cpu_14threads_$rep.json" 2>&1 | grep bench-data
      $T bench-data "${common[@]}" --set data.workers=16 --out "$out/bench/data_cpu_16threads_$rep.json" 2>&1 \
        | grep bench-data
    done
    dataloaders _after
    ;;
  restart)  # issue 4 with the shards `trainer pack` writes (JPEGs rewritten losslessly with restart markers, so crop
            # decoding cuts the window out): the CPU pipeline alone from the folder, from byte-for-byte shards and
            # from restart shards (14 and 16 threads), two interleaved repeats between two runs of both DataLoaders;
            # GPU decode from restart shards; ResNet-50 end to end from restart shards and from the folder against
            # synthetic, with the default 14 threads and with 8
    jpeg_set
    TIMEFORMAT="%R s wall"
    { time $T pack --src data/imagenet_like/train --out data/rshards/train;
      time $T pack --src data/imagenet_like/train --out data/pshards/train --no-restart-markers; } > "$out/pack.txt" 2>&1
    cat "$out/pack.txt"
    du -sb data/imagenet_like/train data/rshards/train data/pshards/train | tee -a "$out/pack.txt"
    common=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=60)
    rs=(--set data.source=shards --set data.root=data/rshards --set data.eval_split=)
    ps=(--set data.source=shards --set data.root=data/pshards --set data.eval_split=)
    dataloaders _before
    for rep in 1 2; do
      $T bench-data "${common[@]}" --out "$out/bench/data_folder_14threads_$rep.json" 2>&1 | grep -E "bench-data|error"
      $T bench-data "${common[@]}" "${ps[@]}" --out "$out/bench/data_plainshards_14threads_$rep.json" 2>&1 \
        | grep -E "bench-data|error"
      $T bench-data "${common[@]}" "${rs[@]}" --out "$out/bench/data_restartshards_14threads_$rep.json" 2>&1 \
        | grep -E "bench-data|error"
      $T bench-data "${common[@]}" "${rs[@]}" --set data.workers=16 \
        --out "$out/bench/data_restartshards_16threads_$rep.json" 2>&1 | grep -E "bench-data|error"
    done
    dataloaders _after
    $T bench-data "${gpudata[@]}" "${rs[@]}" --out "$out/bench/data_gpudecode_restartshards.json" 2>&1 \
      | grep -E "bench-data|error"
    e2e=("${e2e100[@]}")
    erun resnet50_bf16_synthetic
    erun resnet50_bf16_restartshards_14threads --set bench.data=pipeline "${rs[@]}"
    erun resnet50_bf16_folder_8threads --set bench.data=pipeline --set data.workers=8
    erun resnet50_bf16_restartshards_8threads --set bench.data=pipeline "${rs[@]}" --set data.workers=8
    erun resnet50_bf16_synthetic_2
    ;;
  ratio)  # issue 4's ratio with both sides in steady state: 32 warm-up + 160 timed batches each, the DataLoader's
          # sampler running through shuffled passes back to back as trainer's threads go on into the next epoch;
          # restart shards with 14 and 16 threads, the folder with 14 and GPU decode from the folder with 4 (two
          # interleaved repeats) between two runs of both DataLoaders with 14 and with 16 workers; then the
          # earlier method once (DataLoader 5 + 40 batches with a new iterator per epoch, trainer 5 + 60) for
          # comparison; the data tests first
    (cd build && ctest -L data -j 8 2>&1 | grep -E "tests passed|tests failed|Failed") | tee "$out/ctest_data.log"
    jpeg_set
    $T pack --src data/imagenet_like/train --out data/rshards/train > "$out/pack.txt" 2>&1
    tail -2 "$out/pack.txt"
    steady=(--config configs/imagenet_like.yaml --set bench.warmup_steps=32 --set bench.steps=160)
    rs=(--set data.source=shards --set data.root=data/rshards --set data.eval_split=)
    dl 14 _before
    dl 16 _before
    for rep in 1 2; do
      $T bench-data "${steady[@]}" "${rs[@]}" --out "$out/bench/data_restartshards_14threads_$rep.json" 2>&1 \
        | grep -E "bench-data|error"
      $T bench-data "${steady[@]}" "${rs[@]}" --set data.workers=16 \
        --out "$out/bench/data_restartshards_16threads_$rep.json" 2>&1 | grep -E "bench-data|error"
      $T bench-data "${steady[@]}" --out "$out/bench/data_folder_14threads_$rep.json" 2>&1 | grep -E "bench-data|error"
      $T bench-data "${steady[@]}" --set data.decode=gpu --set data.workers=4 \
        --out "$out/bench/data_gpudecode_folder_4threads_$rep.json" 2>&1 | grep -E "bench-data|error"
    done
    dl 14 _after
    dl 16 _after
    dl 16 _earlier_method --warmup 5 --batches 40 --epoch-iterators
    $T bench-data --config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=60 "${rs[@]}" \
      --out "$out/bench/data_restartshards_14threads_earlier_method.json" 2>&1 | grep -E "bench-data|error"
    ;;
  ratio_shrunk)  # the same steady-state comparison with shards shrunk by `trainer pack --max-side` (320 and 384,
                 # restart markers on; lossy: the FFCV trick the issue names) and full-size restart shards, against
                 # both DataLoaders on the original files with 14 and 16 workers, before and after
    jpeg_set
    TIMEFORMAT="%R s wall"
    { time $T pack --src data/imagenet_like/train --out data/rshards/train;
      time $T pack --src data/imagenet_like/train --out data/s320r/train --max-side 320;
      time $T pack --src data/imagenet_like/train --out data/s384r/train --max-side 384; } > "$out/pack.txt" 2>&1
    grep -E "packed|wall" "$out/pack.txt"
    steady=(--config configs/imagenet_like.yaml --set bench.warmup_steps=32 --set bench.steps=160
            --set data.source=shards --set data.eval_split=)
    dl 14 _before
    dl 16 _before
    for rep in 1 2; do
      for set in s320r s384r rshards; do
        $T bench-data "${steady[@]}" --set data.root=data/$set --out "$out/bench/data_${set}_14threads_$rep.json" \
          2>&1 | grep -E "bench-data|error" | sed "s/^/$set: /"
      done
      $T bench-data "${steady[@]}" --set data.root=data/s320r --set data.workers=16 \
        --out "$out/bench/data_s320r_16threads_$rep.json" 2>&1 | grep -E "bench-data|error" | sed "s/^/s320r: /"
    done
    dl 14 _after
    dl 16 _after
    ;;
  gains)  # the gain of DCT scaling and of crop-only decoding, each switched off alone and both, from the folder
          # and from restart-marker shards (crop-only off there: whole images, no cut), 14 threads, 5 + 60 batches
    jpeg_set
    $T pack --src data/imagenet_like/train --out data/rshards/train > "$out/pack.txt" 2>&1
    short=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=60)
    rs=(--set data.source=shards --set data.root=data/rshards --set data.eval_split=)
    for src in folder rshards; do
      s=(); [ $src = rshards ] && s=("${rs[@]}")
      for v in "default" "data.dct_scale=false" "data.crop_decode=false" "both"; do
        case $v in
          default) x=() ;;
          both) x=(--set data.dct_scale=false --set data.crop_decode=false) ;;
          *) x=(--set "$v") ;;
        esac
        $T bench-data "${short[@]}" "${s[@]}" "${x[@]}" --out "$out/bench/data_${src}_${v//[.=]/_}.json" 2>&1 \
          | grep -E "bench-data|error" | sed "s/^/$src $v: /"
      done
    done
    ;;
  e2e_restart)  # ResNet-50 bf16 end to end (e2e100) from restart-marker shards with the default 14 threads,
                # between two synthetic-data runs
    jpeg_set
    [ -d data/rshards ] || $T pack --src data/imagenet_like/train --out data/rshards/train > "$out/pack.txt" 2>&1
    e2e=("${e2e100[@]}")
    erun resnet50_bf16_synthetic
    erun resnet50_bf16_restartshards_14threads --set bench.data=pipeline --set data.source=shards \
      --set data.root=data/rshards
    erun resnet50_bf16_synthetic_2
    ;;
  shrunk)  # the FFCV trick with restart markers: `trainer pack --max-side 320` with and without them, the CPU
           # pipeline alone (14 and 16 threads), against both DataLoaders on the originals and on the same shrunk
           # images (unpacked into an ImageFolder), two interleaved repeats
    jpeg_set
    TIMEFORMAT="%R s wall"
    { time $T pack --src data/imagenet_like/train --out data/s320r/train --max-side 320;
      time $T pack --src data/imagenet_like/train --out data/s320p/train --max-side 320 --no-restart-markers; } \
      > "$out/pack.txt" 2>&1
    cat "$out/pack.txt"
    python3 - <<'PY'
import glob, os, tarfile
classes = open("data/s320p/train/classes.txt").read().split("\n")
for t in sorted(glob.glob("data/s320p/train/*.tar")):
    with tarfile.open(t) as f:
        names = set(f.getnames())
        for m in sorted(n for n in names if n.endswith(".jpg")):
            k = m[:-4]
            d = os.path.join("data/s320_folder/train", classes[int(f.extractfile(k + ".cls").read())])
            os.makedirs(d, exist_ok=True)
            open(os.path.join(d, os.path.basename(m)), "wb").write(f.extractfile(m).read())
print("unpacked", sum(len(fs) for _, _, fs in os.walk("data/s320_folder/train")), "shrunk images")
PY
    common=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=60
            --set data.source=shards --set data.eval_split=)
    dataloaders _before
    dataloaders _shrunk_before data/s320_folder/train
    for rep in 1 2; do
      $T bench-data "${common[@]}" --set data.root=data/s320r --out "$out/bench/data_s320restart_14threads_$rep.json" \
        2>&1 | grep -E "bench-data|error"
      $T bench-data "${common[@]}" --set data.root=data/s320p --out "$out/bench/data_s320plain_14threads_$rep.json" \
        2>&1 | grep -E "bench-data|error"
      $T bench-data "${common[@]}" --set data.root=data/s320r --set data.workers=16 \
        --out "$out/bench/data_s320restart_16threads_$rep.json" 2>&1 | grep -E "bench-data|error"
    done
    dataloaders _shrunk_after data/s320_folder/train
    dataloaders _after
    ;;
  autofit)  # data.decode auto in `trainer` itself: 4 epochs of the JPEG set, evaluation at the end (which follows
            # the decision); with 4 decode threads (the GPU path expected) and the default (the CPU path expected)
    jpeg_set
    for w in 4 -1; do
      $T --config configs/imagenet_like.yaml --set data.decode=auto --set data.workers=$w --set run.out_dir="$out/runs" \
        --set run.name=auto_workers$w --set run.progress=never 2>&1 | tee "$out/autofit_workers$w.log" \
        | grep -E "decode auto|done in|error|trained" | sed "s/^/workers $w: /"
    done
    rm -rf "$out/runs"  # weights and checkpoints: the logs are what is kept
    ;;
  dtype)  # data.dtype: batches in bfloat16 (auto, training in bf16) against float32 (as before), ResNet-50 end to
          # end (three interleaved repeats of synthetic and GPU decode each way; CPU decode and the captured step
          # once) and the pipeline alone each way
    jpeg_set
    e2e=("${e2e100[@]}")
    f32=(--set data.dtype=float32)
    for rep in 1 2 3; do
      erun resnet50_bf16_synthetic_$rep
      erun resnet50_bf16_synthetic_f32_$rep "${f32[@]}"
      erun resnet50_bf16_pipeline_gpudecode_$rep "${gpudec[@]}"
      erun resnet50_bf16_pipeline_gpudecode_f32_$rep "${gpudec[@]}" "${f32[@]}"
    done
    erun resnet50_bf16_pipeline_cpudecode --set bench.data=pipeline
    erun resnet50_bf16_graph_synthetic --set train.cuda_graph=true
    erun resnet50_bf16_graph_gpudecode --set train.cuda_graph=true "${gpudec[@]}"
    for rep in 1 2; do
      $T bench-data "${gpudata[@]}" --out "$out/bench/data_gpu_$rep.json" 2>&1 | grep -E "bench-data|error"
      $T bench-data "${gpudata[@]}" "${f32[@]}" --out "$out/bench/data_gpu_f32_$rep.json" 2>&1 | grep -E "bench-data|error"
    done
    ;;
  issue9)  # the GPU decode issue's figures in one call: the pipeline alone (GPU decode, 4 threads) against both
            # DataLoader baselines, then e2e100 (ResNet-50 end to end against synthetic data)
    jpeg_set
    for rep in 1 2 3; do
      $T bench-data "${gpudata[@]}" --out "$out/bench/data_gpu_$rep.json" 2>&1 | grep -E "bench-data|error"
    done
    dataloaders
    bash "$root/scripts/offline/host-session.sh" e2e100 "$out"
    ;;
  graph)  # train.cuda_graph fed by the JPEG pipeline: ResNet-50 end to end, eager and captured, synthetic and GPU
          # decode (4 threads), interleaved
    jpeg_set
    e2e=("${e2e100[@]}")
    dec=("${gpudec[@]}")
    for rep in 1 2; do
      erun resnet50_bf16_graph_synthetic_$rep --set train.cuda_graph=true
      erun resnet50_bf16_graph_gpudecode_$rep --set train.cuda_graph=true "${dec[@]}"
      erun resnet50_bf16_synthetic_$rep
      erun resnet50_bf16_pipeline_gpudecode_$rep "${dec[@]}"
    done
    erun resnet50_bf16_graph_cpudecode --set train.cuda_graph=true --set bench.data=pipeline
    ;;
  gpuprof)  # ResNet-50 training steps profiled with GPU decode and with CPU decode: which kernels the GPU path adds
            # (GRAPH=1: the step captured, train.cuda_graph)
    jpeg_set
    for mode in gpu cpu; do
      $T --config configs/imagenet_like.yaml --set data.decode=$mode --set data.workers=$([ $mode = gpu ] && echo 4 || echo 14) \
        --set train.cuda_graph=$([ "${GRAPH:-0}" = 1 ] && echo true || echo false) --set train.epochs=3 --set train.max_steps=26 --set data.eval_split= --set checkpoint.every_epoch=false \
        --set run.out_dir="$out/prof" --set run.name=$mode --profile 20:24 > "$out/prof_$mode.log" 2>&1 \
        || tail -20 "$out/prof_$mode.log"
    done
    python3 scripts/kernel_table.py "$out/prof/gpu/trace.json" "$out/prof/cpu/trace.json" --top 40 --by-stream \
      | tee "$out/prof_kernels.txt"
    for mode in gpu cpu; do  # idle time on the training stream: host-bound or device-bound, and what ran meanwhile
      python3 scripts/trace_gaps.py "$out/prof/$mode/trace.json" --json "$out/prof_gaps_$mode.json" \
        | tee "$out/prof_gaps_$mode.txt"
    done
    ;;
  autoaug)  # RandAugment / TrivialAugmentWide: the pipeline alone (CPU and GPU decode) with and without, and the
            # torch DataLoader with torchvision's RandAugment in the same call; ResNet-50 end to end with RandAugment
    jpeg_set
    common=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=40)
    for aa in none rand trivial; do
      $T bench-data "${common[@]}" --set data.auto_augment=$aa --out "$out/bench/data_cpu_$aa.json" 2>&1 | grep bench-data
      $T bench-data "${common[@]}" --set data.auto_augment=$aa --set data.decode=gpu --set data.workers=4 \
        --out "$out/bench/data_gpu_$aa.json" 2>&1 | grep -E "bench-data|error"
      python3 scripts/bench_torch_dataloader.py data/imagenet_like/train --workers 16 --batches 40 --warmup 5 --epoch-iterators --auto-augment $aa \
        --out "$out/bench/data_torch_dataloader_$aa.json" 2>&1 | grep img_per_s
    done
    $T bench --config configs/imagenet_like.yaml --set data.decode=gpu --set data.workers=4 --set data.eval_split= \
      --set data.auto_augment=rand --set bench.data=pipeline --set bench.warmup_steps=10 --set bench.steps=45 \
      --out "$out/bench/resnet50_bf16_pipeline_gpudecode_randaugment.json" 2>&1 | grep -E "bench resnet50|error"
    $T bench --config configs/imagenet_like.yaml --set data.decode=gpu --set data.workers=4 --set data.eval_split= \
      --set bench.data=pipeline --set bench.warmup_steps=10 --set bench.steps=45 \
      --out "$out/bench/resnet50_bf16_pipeline_gpudecode.json" 2>&1 | grep -E "bench resnet50|error"
    $T bench --config configs/imagenet_like.yaml --set bench.warmup_steps=10 --set bench.steps=45 \
      --out "$out/bench/resnet50_bf16_synthetic.json" 2>&1 | grep "bench resnet50"
    ;;
  interp)  # train with trainer's resize, evaluate the same weights with trainer's and with torchvision's (PIL);
            # short runs too, so top-1 is not saturated on this 12-class set
    jpeg_set
    for ep in ${EPOCHS:-2 4 30}; do
      $T --config configs/imagenet_like.yaml --set model.name=resnet18 --set train.epochs=$ep \
        --set run.out_dir="$out/runs_$ep" > "$out/interp_train_$ep.log" 2>&1 || tail -20 "$out/interp_train_$ep.log"
      w="$out/runs_$ep/imagenet_like/model.safetensors"
      echo "== resnet18, $ep epochs"
      $T eval --config configs/imagenet_like.yaml --set model.name=resnet18 --weights "$w" 2>&1 \
        | tee "$out/eval_trainer_$ep.txt" | grep -E "^eval|error"
      python3 scripts/eval_torchvision.py data/imagenet_like/val "$w" --model resnet18 --num-classes 12 \
        --out "$out/eval_torchvision_$ep.json" | grep -E "top1|loss"
      rm -rf "$out/runs_$ep/imagenet_like/checkpoints" "$w"
    done
    ;;
  pipeline)  # the pipeline alone, every path, with the torch DataLoader in the same call
    jpeg_set
    $T pack --src data/imagenet_like/train --out data/shards320/train --max-side 320 > "$out/pack.txt" 2>&1
    common=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=40)
    python3 scripts/bench_torch_dataloader.py data/imagenet_like/train --workers 16 --batches 40 --warmup 5 --epoch-iterators \
      --out "$out/bench/data_torch_dataloader.json" 2>&1 | grep img_per_s
    $T bench-data "${common[@]}" --out "$out/bench/data_cpu.json" 2>&1 | grep bench-data
    $T bench-data "${common[@]}" --set data.decode=gpu --set data.workers=4 --out "$out/bench/data_gpu.json" 2>&1 \
      | grep -E "bench-data|error"
    $T bench-data "${common[@]}" --set data.source=shards --set data.root=data/shards320 \
      --out "$out/bench/data_cpu_shards320.json" 2>&1 | grep bench-data
    $T bench-data "${common[@]}" --set data.source=shards --set data.root=data/shards320 --set data.decode=gpu \
      --set data.workers=4 --out "$out/bench/data_gpu_shards320.json" 2>&1 | grep -E "bench-data|error"
    python3 scripts/bench_torch_dataloader.py data/imagenet_like/train --workers 16 --batches 40 --warmup 5 --epoch-iterators \
      --out "$out/bench/data_torch_dataloader_again.json" 2>&1 | grep img_per_s
    ;;
  gputest)
    (cd build && ctest -L gpu --output-on-failure 2>&1) > "$out/ctest_gpu.log"; rc=$?
    grep -E "Passed|Failed|Skipped|tests passed" "$out/ctest_gpu.log"
    build/tests/data/data_gpu_test > "$out/gpudecode_test.log" 2>&1
    grep -E "^  |OK \]|FAILED" "$out/gpudecode_test.log"
    exit $rc
    ;;
  data)
    python3 scripts/make_imagenet_like.py .gpu-deps/photos data/imagenet_like --train 4000 --val 500 \
      | tee "$out/dataset.txt"
    mkdir -p "$out/bench"
    common=(--config configs/imagenet_like.yaml --set bench.warmup_steps=5 --set bench.steps=40)
    $T bench-data "${common[@]}" --out "$out/bench/data_trainer.json" 2>&1 | grep bench-data
    $T bench-data "${common[@]}" --set data.dct_scale=false --out "$out/bench/data_trainer_nodct.json" 2>&1 | grep bench-data
    $T bench-data "${common[@]}" --set data.crop_decode=false --out "$out/bench/data_trainer_nocrop.json" 2>&1 | grep bench-data
    $T bench-data "${common[@]}" --set data.crop_decode=false --set data.dct_scale=false \
      --out "$out/bench/data_trainer_plain.json" 2>&1 | grep bench-data
    python3 scripts/bench_torch_dataloader.py data/imagenet_like/train --workers 16 --batches 40 --warmup 5 --epoch-iterators \
      --out "$out/bench/data_torch_dataloader.json" 2>&1 | grep img_per_s
    ;;
  e2e)
    $T --config configs/imagenet_like.yaml --set run.out_dir="$out/runs" 2>&1 | tee "$out/e2e.log" \
      | grep -E "done in|trained|error|warn"
    ;;
  obs)
    jpeg_set
    $T --config configs/imagenet_like.yaml --set run.out_dir="$out/obs" --set train.epochs=3 --set run.log_interval=5 \
      --profile 30:32 > "$out/obs.log" 2>&1 || tail -20 "$out/obs.log"
    grep -E "step (10|40) |done in|bound|profiler" "$out/obs.log"
    python3 - "$out/obs/imagenet_like/trace.json" <<'PY'
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
tot = collections.Counter()
for e in ev:
    if e.get("ph") == "X" and e.get("name") in ("data", "forward", "backward", "optimizer", "all-reduce"):
        tot[e["name"]] += e["dur"]
kern = sum(e["dur"] for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel")
print("trace, host ms per range over 2 steps:", {k: round(v / 1e3, 2) for k, v in tot.items()},
      "| GPU kernel ms:", round(kern / 1e3, 2))
PY
    mkdir -p "$out/bench"
    $T bench --config configs/imagenet_like.yaml --set bench.data=pipeline --set bench.warmup_steps=10 \
      --set bench.steps=45 --out "$out/bench/resnet50_bf16_pipeline_trainer.json" 2>&1 | grep "bench resnet50"
    $T bench --config configs/imagenet_like.yaml --set bench.warmup_steps=10 --set bench.steps=45 \
      --out "$out/bench/resnet50_bf16_synthetic12_trainer.json" 2>&1 | grep "bench resnet50"
    NO_COMPILE=1 scripts/bench.sh "$out/bench" resnet50 bf16 2>&1 | tail -1
    ;;
  vitprof)  # where ViT-B's step goes, trainer against PyTorch eager (kernel totals over 2 steps)
    $T --config configs/bench.yaml --set model.name=vit_base_patch16_224 --set model.channels_last=false \
      --set data.synthetic_samples=8192 --set train.epochs=1 --set train.max_steps=24 --set data.eval_split= \
      --set train.eval_interval=0 --set checkpoint.every_epoch=false --set run.out_dir="$out/vit" --set run.name=r \
      --profile 20:22 > "$out/vit.log" 2>&1 || tail -20 "$out/vit.log"
    python3 scripts/profile_pytorch.py --model vit_base_patch16_224 --out "$out/vit_pytorch_trace.json"
    python3 scripts/kernel_table.py "$out/vit/r/trace.json" "$out/vit_pytorch_trace.json" --top 30 \
      | tee "$out/vit_kernels.txt"
    ;;
  hardening)  # issue 23 on the GPU: two SIGTERMs from GNU timeout still write the preemption checkpoint (exit 3);
    # the step's speed against PyTorch eager in the same call after the per-micro-batch reseed of model noise
    timeout --preserve-status -s TERM 40 $T --config configs/bench.yaml --set data.synthetic_samples=5000 \
      --set data.batch_size=128 --set train.epochs=1000 --set run.out_dir="$out/runs" --set run.name=timeout \
      --set checkpoint.every_epoch=false --set train.eval_interval=0 > "$out/timeout.log" 2>&1
    echo "under timeout: exit $? (3 = stopped after writing its checkpoint)"
    grep -E "stop requested|second signal|checkpoint written" "$out/timeout.log"
    ls "$out/runs/timeout/checkpoints" 2>&1
    for w in "resnet50 bf16" "vit_base_patch16_224 bf16"; do
      set -- $w
      NO_COMPILE=1 scripts/bench.sh "$out/bench" "$1" "$2" 2>&1 | tail -1
    done
    SKIP_PYTORCH=1 EXTRA=train.cuda_graph=true SUFFIX=_graph scripts/bench.sh "$out/bench" resnet50 bf16 2>&1 | tail -1
    ;;
  stopdist)  # issue 23 item 4 on NCCL: a rank started by `trainer launch`, SIGTERM (from GNU timeout, forwarded) with
    # log points 10,000 steps apart: the stop is agreed within about a second, the checkpoint written, exit 3
    t0=$(date +%s.%N)
    timeout --preserve-status -s TERM 40 $T launch --nproc-per-node 1 --grace-s 60 -- --config configs/bench.yaml \
      --set data.synthetic_samples=5000 --set data.batch_size=128 --set train.epochs=1000 --set run.log_interval=10000 \
      --set run.out_dir="$out/runs" --set run.name=launch_timeout --set checkpoint.every_epoch=false \
      --set train.eval_interval=0 > "$out/launch_timeout.log" 2>&1
    rc=$?
    echo "launch under timeout: exit $rc after $(python3 -c "import time; print(round(time.time() - $t0, 1))") s (SIGTERM at 40 s)"
    grep -E "stop requested|second signal|checkpoint written|joined" "$out/launch_timeout.log"
    ;;
  fusedbn)  # issue 24: the kernel harnesses and GPU tests of the fused batch norm and max-pool, then ResNet-50 bf16
    # and fp16 against PyTorch eager and torch.compile in this call (UNFUSED=1: also with model.fused_norm off)
    stdbuf -oL build/tests/models/models_gpu_test > "$out/fused_bn_test.log" 2>&1
    stdbuf -oL build/tests/engine/engine_gpu_test --gtest_filter='FusedBatchNorm.*:*CudaGraph*' >> "$out/fused_bn_test.log" 2>&1
    grep -E " ms|step [0-9]: loss|OK \]|FAILED|Failure" "$out/fused_bn_test.log" | head -80
    for prec in bf16 fp16; do
      [ "${UNFUSED:-0}" = "1" ] && SKIP_PYTORCH=1 EXTRA=model.fused_norm=off SUFFIX=_unfused \
        scripts/bench.sh "$out/bench" resnet50 $prec 2>&1 | tail -1
      scripts/bench.sh "$out/bench" resnet50 $prec 2>&1 | tail -1
    done
    ;;
  bnprof)  # where ResNet-50 bf16's step goes: fused batch norm against off, and against torch.compile (2 steps each;
    # runs and traces stay in /tmp/bnprof, too large to come back)
    for fn in auto off; do
      $T --config configs/bench.yaml --set data.synthetic_samples=8192 --set train.epochs=1 --set train.max_steps=24 \
        --set data.eval_split= --set train.eval_interval=0 --set checkpoint.every_epoch=false \
        --set model.fused_norm=$fn --set run.out_dir=/tmp/bnprof --set run.name=$fn --profile 20:22 \
        > "$out/rn50_$fn.log" 2>&1 || tail -20 "$out/rn50_$fn.log"
    done
    python3 scripts/profile_pytorch.py --model resnet50 --precision bf16 --channels-last --compile \
      --out /tmp/bnprof/compile_trace.json > "$out/rn50_compile.log" 2>&1 || tail -20 "$out/rn50_compile.log"
    python3 scripts/kernel_table.py /tmp/bnprof/auto/trace.json /tmp/bnprof/off/trace.json --top 40 \
      | tee "$out/rn50_kernels_fused_vs_off.txt"
    python3 scripts/kernel_table.py /tmp/bnprof/auto/trace.json /tmp/bnprof/compile_trace.json --top 40 \
      | tee "$out/rn50_kernels_fused_vs_compile.txt"
    ;;
  fmnist)
    $T --config configs/fashion_mnist.yaml --set data.root="$TRAINER_FMNIST" --set run.out_dir="$out/runs" 2>&1 \
      | tee "$out/fmnist.log" | grep -E "done in|trained|error"
    ;;
esac
