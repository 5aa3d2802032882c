#!/usr/bin/env bash
# The GPU host's lab phases that are not benchmark-suite entries, one device call each:
#   build | test (all tests) | gputest (the GPU-labelled ones, verbose)
#   suite MODE (scripts/benchmark.sh quick|full into OUTDIR/suite: the training steps against PyTorch eager and
#     torch.compile, the input pipeline against the torch DataLoader, end to end from JPEGs)
#   fusedbn (the fused batch-norm and max-pool harnesses and GPU tests, ResNet-50 bf16 and fp16 against eager and
#     torch.compile; UNFUSED=1 adds model.fused_norm off)
#   bnprof (ResNet-50 bf16 steps profiled fused, with model.fused_norm off, and PyTorch under torch.compile)
#   fusedln (the GPU tests of ViT's fused kernels, ViT-B bf16 against PyTorch eager, torch.compile and fused_norm off)
#   vitprof (where ViT-B's step goes, trainer against PyTorch eager; VS_COMPILE=1: against torch.compile)
#   obs (a JPEG training run's step split, verdicts and a profile; bench from the pipeline vs synthetic)
#   hardening (SIGTERM twice from GNU timeout on a GPU run) | stopdist (a rank under `trainer launch` on NCCL stops
#     within about a second of SIGTERM) | fmnist (a Fashion-MNIST recipe over seeds)
#   stepab (ResNet-50's default step against it without programmatic dependent launches (TRAINER_PDL=0) and/or the
#     space-to-depth stem (model.stem_s2d=false), PyTorch in the same call; PROFILE=1: default vs neither, profiled)
#   hybrid (all the GPU decode tests, then the pipeline alone with cpu, gpu and hybrid)
#   e2e (MODELS, default ResNet-18 and ResNet-50, end to end from JPEGs with each of DECODES (cpu auto gpu
#     cpu_cached: the decoded RAM cache; auto_cached, hybrid, hybrid_sNN (a fixed share of NN%), shards_cpu, ...
#     too if named: shards_X is the training split packed by `trainer pack`, decoded by X; stdshards_mK: packed
#     with the standard Huffman tables, GPU decode with K windows a mosaic (m0: one by one); X_smsN: decode X with
#     the GPU loader's kernels on N SMs, data.gpu_decode_sms; one named twice, for runs in turns, writes its second
#     JSON as X_2) against the synthetic batch, WARMUP 40 + STEPS 200;
#     EXTRA: --set overrides for every run, SUFFIX: tags their JSON)
#   turns (VARIANTS, settings of one model and decode end to end, in turns over ROUNDS: data.thread_nice 0 / 10;
#     a variant of several settings joins them with commas)
#   prof (MODEL from the JPEG folder with DECODE against synthetic, 10 training steps profiled: kernels per stream,
#     the training stream's gaps, the CUDA calls per host thread)
#   convfusion (scripts/probes/conv_bn_fusion.py: cuDNN's fused scale-bias-ReLU + convolution + statistics graphs
#     for ResNet-50's shapes, right and fast; ONLY: some shapes)
#   vitequiv (ViT-Ti trained with model.fused_norm off over SEEDS (0 1 2) and auto at the first seed: the fused
#     run's loss curve against the spread between seeds of off; only metrics come back, not the weights)
# The phases of earlier issues (pipeline paths, decode choices, shards, ratios) became the suite's sections or
# are in git history with the results they made (bench/results/*/README.md name their commits).
# Logs and JSON go to OUTDIR.
set -uo pipefail
phase=$1 out=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
mkdir -p "$out"
source .gpu-deps/install-debs.sh > /dev/null
T=${T:-build/apps/trainer/trainer}  # another binary for A/B in one call
jpeg_set() {
  [ -d data/imagenet_like ] || python3 scripts/make_imagenet_like.py .gpu-deps/photos data/imagenet_like \
    --train 4000 --val 500 > "$out/dataset.txt"
  mkdir -p "$out/bench"
}
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
  gputest)
    (cd build && ctest -L gpu --output-on-failure 2>&1) > "$out/ctest_gpu.log"; rc=$?
    grep -E "Passed|Failed|Skipped|tests passed" "$out/ctest_gpu.log"
    build/tests/data/data_gpu_test > "$out/gpudecode_test.log" 2>&1
    grep -E "^  |OK \]|FAILED" "$out/gpudecode_test.log"
    exit $rc
    ;;
  suite)  # the benchmark suite; $3: quick (default) or full
    PYTHON=python3 scripts/benchmark.sh "${3:-quick}" "$out/suite"
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
    python3 scripts/profile_pytorch.py --model vit_base_patch16_224 ${VS_COMPILE:+--compile} \
      --out "$out/vit_pytorch_trace.json"
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
  fusedln)  # issue 25: the GPU tests of ViT's fused kernels (add + LayerNorm, bias + GELU, q/k/v gradient stack), then
    # ViT-B/16 bf16 against PyTorch eager and torch.compile in this call and with model.fused_norm off
    stdbuf -oL build/tests/models/models_gpu_test --gtest_filter='FusedLayerNorm.*:FusedBiasGelu.*:QkvSplit.*' \
      > "$out/fused_ln_test.log" 2>&1
    grep -E " ms|OK \]|FAILED|Failure" "$out/fused_ln_test.log" | head -40
    SKIP_PYTORCH=1 EXTRA=model.fused_norm=off SUFFIX=_unfused \
      scripts/bench.sh "$out/bench" vit_base_patch16_224 bf16 2>&1 | tail -1
    scripts/bench.sh "$out/bench" vit_base_patch16_224 bf16 2>&1 | tail -1
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
  fmnist)  # a Fashion-MNIST recipe: CONFIG (configs/fashion_mnist.yaml), one run per seed of SEEDS (0), SETS: more
    # --set options; logs and metrics come back, weights stay in /tmp/fmnist (a run of the same name there before,
    # on a machine kept warm, is removed so that its metrics are not taken for this one's); then the seeds' summary
    cfg=${CONFIG:-configs/fashion_mnist.yaml}
    metrics=()
    for seed in ${SEEDS:-0}; do
      name=$(basename "$cfg" .yaml)_seed$seed
      rm -rf "/tmp/fmnist/$name"
      $T --config "$cfg" --set data.root="$TRAINER_FMNIST" --set run.out_dir=/tmp/fmnist --set run.name=$name \
        --set run.seed=$seed ${SETS:-} > "$out/$name.log" 2>&1
      cp /tmp/fmnist/$name/metrics.jsonl "$out/$name.metrics.jsonl" 2>/dev/null && metrics+=("$out/$name.metrics.jsonl")
      grep -E "eval loss|trained|rror" "$out/$name.log" | tail -4
    done
    [ ${#metrics[@]} -gt 0 ] && python3 scripts/eval_summary.py "${metrics[@]}" --json "$out/summary.json"
    ;;
  stepab)  # issue 24: ResNet-50 bf16's default step against it without dependent launches (TRAINER_PDL=0) and/or
    # the space-to-depth stem (model.stem_s2d=false), PyTorch in the same call; PROFILE=1: default vs both off
    SUFFIX=_default scripts/bench.sh "$out/bench" resnet50 bf16 2>&1 | tail -1
    TRAINER_PDL=0 SKIP_PYTORCH=1 SUFFIX=_nopdl scripts/bench.sh "$out/bench" resnet50 bf16 2>&1 | tail -1
    SKIP_PYTORCH=1 EXTRA=model.stem_s2d=false SUFFIX=_nos2d scripts/bench.sh "$out/bench" resnet50 bf16 2>&1 | tail -1
    TRAINER_PDL=0 SKIP_PYTORCH=1 EXTRA=model.stem_s2d=false SUFFIX=_neither scripts/bench.sh "$out/bench" resnet50 \
      bf16 2>&1 | tail -1
    if [ "${PROFILE:-0}" = "1" ]; then  # kernel by kernel, 2 steps each
      for v in default neither; do
        env TRAINER_PDL=$([ $v = neither ] && echo 0 || echo 1) $T --config configs/bench.yaml \
          --set data.synthetic_samples=8192 --set train.epochs=1 --set train.max_steps=24 --set data.eval_split= \
          --set train.eval_interval=0 --set checkpoint.every_epoch=false \
          --set model.stem_s2d=$([ $v = neither ] && echo false || echo true) \
          --set run.out_dir=/tmp/stepab --set run.name=$v --profile 20:22 > "$out/prof_$v.log" 2>&1 ||
          tail -20 "$out/prof_$v.log"
      done
      python3 scripts/kernel_table.py /tmp/stepab/default/trace.json /tmp/stepab/neither/trace.json --top 45 \
        | tee "$out/kernels_default_vs_neither.txt" | head -3
    fi
    ;;
  hybrid)  # issue 28: data.decode hybrid's GPU tests and the pipeline alone with each decode choice
    jpeg_set
    build/tests/data/data_gpu_test --gtest_filter='GpuDecode.*' > "$out/hybrid_test.log" 2>&1
    grep -E "^  |OK \]|FAILED|Failure" "$out/hybrid_test.log" | head -30
    for dec in cpu gpu hybrid; do
      $T bench-data --config configs/imagenet_like.yaml --set data.decode=$dec \
        --out "$out/bench/pipeline_$dec.json" 2>&1 | grep "bench-data"
    done
    ;;
  e2e)  # issues 24 and 28: models end to end from the JPEG folder with each decode choice against synthetic
    jpeg_set
    # WARMUP + STEPS: configs/imagenet_like.yaml's 6-batch prefetch ring, filled at start-up, must be a small part
    # of the timed steps, or a CPU path that cannot keep up looks faster than it is (bench/NOTES.md)
    b=(bench --config configs/imagenet_like.yaml --set bench.warmup_steps=${WARMUP:-40} --set bench.steps=${STEPS:-200})
    for kv in ${EXTRA:-}; do b+=(--set "$kv"); done  # e.g. EXTRA=train.cuda_graph=true (with SUFFIX=_graph)
    for model in ${MODELS:-resnet18 resnet50}; do
      $T "${b[@]}" --set model.name=$model --out "$out/bench/${model}${SUFFIX:-}_synthetic.json" 2>&1 | grep "bench $model"
      declare -A seen=()
      for dec in ${DECODES:-cpu auto gpu cpu_cached}; do
        seen[$dec]=$(( ${seen[$dec]:-0} + 1 ))  # a decode named twice (A/B in turns): its second JSON is _2
        tag=$dec
        [ "${seen[$dec]}" -gt 1 ] && tag=${dec}_${seen[$dec]}
        case $dec in
          cpu_cached|auto_cached)  # the decoded RAM cache (the set fits; the warm-up is past its first epoch)
            d=(--set data.decode=${dec%_cached} --set data.cache=decoded --set data.cache_gb=8) ;;
          shards_*)  # the training split packed by `trainer pack` (lossless, restart markers), decoded by ${dec#shards_}
            [ -d data/imagenet_like_shards/train ] ||
              $T pack --src data/imagenet_like/train --out data/imagenet_like_shards/train > "$out/pack.log" 2>&1
            d=(--set data.source=shards --set data.root=data/imagenet_like_shards --set data.eval_split=
               --set data.decode=${dec#shards_}) ;;
          stdshards_m*)  # e.g. stdshards_m16: the training split packed with the standard Huffman tables, GPU
            # decode with the windows of 16 files a mosaic (data.gpu_decode_mosaic; m0: each file on its own)
            [ -d data/imagenet_like_stdshards/train ] ||
              $T pack --src data/imagenet_like/train --out data/imagenet_like_stdshards/train --huffman standard \
                > "$out/pack_standard.log" 2>&1
            d=(--set data.source=shards --set data.root=data/imagenet_like_stdshards --set data.eval_split=
               --set data.decode=gpu --set data.gpu_decode_mosaic=${dec#stdshards_m}) ;;
          hybrid_s*)  # e.g. hybrid_s12: data.decode hybrid at a fixed share of 0.12 of each batch (data.hybrid_share)
            d=(--set data.decode=hybrid --set data.hybrid_share=$(awk "BEGIN{print ${dec#hybrid_s} / 100}")) ;;
          *_sms*)  # e.g. gpu_sms16: the GPU loader's kernels on a green context of 16 SMs (data.gpu_decode_sms)
            d=(--set data.decode=${dec%_sms*} --set data.gpu_decode_sms=${dec##*_sms}) ;;
          *) d=(--set data.decode=$dec) ;;
        esac
        $T "${b[@]}" --set model.name=$model --set bench.data=pipeline "${d[@]}" \
          --out "$out/bench/${model}${SUFFIX:-}_$tag.json" 2>&1 | grep "bench $model"
      done
    done
    python3 - "$out/bench" <<'PY'
import glob, json, os, sys
for syn in sorted(glob.glob(os.path.join(sys.argv[1], "*_synthetic.json"))):
    model = os.path.basename(syn)[: -len("_synthetic.json")]
    base = json.load(open(syn))["img_per_s"]
    for f in sorted(glob.glob(os.path.join(sys.argv[1], model + "_*.json"))):
        d = json.load(open(f))
        g = d.get("gpu_decode_timed", {})
        h = g.get("producer_host_ms_per_batch", {})
        side = (f", loader side stream {g['decode_stream_ms_per_batch']:.1f} ms a batch" if g else "") + (
            f" (host: files {h['wait_for_files']:.1f}, decode {h['parse_and_submit_decode']:.1f} = nvJPEG call "
            f"{h.get('of_which_nvjpeg_call', 0):.1f} + CPU part after it {h.get('of_which_cpu_part_after_the_call', 0):.1f}"
            f" + uploads {h.get('of_which_upload_cpu_decoded', 0):.1f}, launches {h['launch_crop_resize_normalise']:.1f})"
            if h else "")
        wait = f", waited {100 * d['data_wait_fraction']:.1f}%" if "data_wait_fraction" in d else ""
        if g.get("mosaics"):
            wait += f", {g['of_which_tiles_of_mosaics']} of {g['nvjpeg_images']} nvJPEG images in {g['mosaics']} mosaics"
        print(f"{os.path.basename(f)[:-5]}: {d['img_per_s']:.0f} img/s ({100 * d['img_per_s'] / base:.1f}% of synthetic)"
              f"{wait}{side} {d.get('decode_auto', '')}")
        if "input_limit" in d:
            print(f"    what sets the pace: {d['input_limit']['stage']}: {d['input_limit']['figures']}")
PY
    ;;
  turns)  # issue 28: settings A/B in turns beside one model, end to end from the JPEG folder: MODEL (resnet18),
    # DECODE (gpu), VARIANTS (each a --set or a TRAINER_* environment variable, or several joined by commas; `base`
    # for none; default data.thread_nice 0 against 10), ROUNDS (3); one synthetic run first, WARMUP 40 + STEPS 200 each
    jpeg_set
    m=${MODEL:-resnet18}
    b=(bench --config configs/imagenet_like.yaml --set bench.warmup_steps=${WARMUP:-40} --set bench.steps=${STEPS:-200}
       --set model.name=$m)
    $T "${b[@]}" --out "$out/bench/${m}_synthetic.json" 2>&1 | grep "bench $m"
    for r in $(seq 1 ${ROUNDS:-3}); do
      for v in ${VARIANTS:-data.thread_nice=0 data.thread_nice=10}; do
        set_v=() env_v=()  # a TRAINER_* item is the run's environment, the rest --set overrides
        [ "$v" = base ] || for kv in ${v//,/ }; do
          if [[ $kv == TRAINER_* ]]; then env_v+=("$kv"); else set_v+=(--set "$kv"); fi
        done
        tag=${v,,} && tag=${tag//[^a-z0-9_]/_}_r$r
        env "${env_v[@]}" $T "${b[@]}" --set bench.data=pipeline --set data.decode=${DECODE:-gpu} "${set_v[@]}" \
          --out "$out/bench/${m}_$tag.json" > "$out/bench/${m}_$tag.log" 2>&1
        python3 - "$out/bench" "$m" "$tag" <<'PY'
import json, sys
d, m, tag = sys.argv[1:4]
syn = json.load(open(f"{d}/{m}_synthetic.json"))["img_per_s"]
r = json.load(open(f"{d}/{m}_{tag}.json"))
g = r.get("gpu_decode_timed", {})
h = g.get("producer_host_ms_per_batch", {})
mosaics = (f", {g['mosaics']} mosaics ({100 * g['mosaic_filler_share']:.1f}% fillers)" if g.get("mosaics") else "")
print(f"{tag}: {r['img_per_s']:.0f} img/s ({100 * r['img_per_s'] / syn:.1f}% of synthetic), waited "
      f"{100 * r['data_wait_fraction']:.1f}%, pace: {r.get('input_limit', {}).get('stage', '?')}"
      + (f", nvJPEG call {h.get('of_which_nvjpeg_call', 0):.1f} ms, side stream {g['decode_stream_ms_per_batch']:.1f} ms"
         " a batch" if g else "") + mosaics)
PY
      done
    done
    ;;
  prof)  # issue 28: MODEL (resnet18) trained from the JPEG folder with DECODE (gpu), steps 30-39 profiled (inside
    # the third epoch of the 4,000-file set), against the same steps on data.source synthetic: kernel totals per
    # stream, then the training stream's idle time, host- or device-bound, with what ran meanwhile (traces stay in
    # /tmp/prof, too large to come back)
    jpeg_set
    m=${MODEL:-resnet18}
    p=(--config configs/imagenet_like.yaml --set model.name=$m --set train.epochs=4 --set train.max_steps=42
       --set data.eval_split= --set checkpoint.every_epoch=false --set run.out_dir=/tmp/prof --profile 30:40)
    for kv in ${EXTRA:-}; do p+=(--set "$kv"); done
    rm -rf /tmp/prof
    $T "${p[@]}" --set data.decode=${DECODE:-gpu} --set run.name=jpeg > "$out/prof_jpeg.log" 2>&1 ||
      tail -20 "$out/prof_jpeg.log"
    $T "${p[@]}" --set data.source=synthetic --set data.synthetic_samples=8192 --set data.train_crop=none \
      --set data.hflip=0 --set run.name=synthetic \
      > "$out/prof_synthetic.log" 2>&1 || tail -20 "$out/prof_synthetic.log"
    python3 scripts/kernel_table.py /tmp/prof/jpeg/trace.json /tmp/prof/synthetic/trace.json --top 30 --by-stream \
      > "$out/prof_kernels.txt"
    head -1 "$out/prof_kernels.txt"; tail -2 "$out/prof_kernels.txt"
    for r in jpeg synthetic; do
      python3 scripts/trace_gaps.py /tmp/prof/$r/trace.json --json "$out/prof_gaps_$r.json" > "$out/prof_gaps_$r.txt"
      echo "== $r"; head -12 "$out/prof_gaps_$r.txt"
    done
    python3 scripts/trace_api.py /tmp/prof/jpeg/trace.json --top 25 --json "$out/prof_api_jpeg.json" \
      > "$out/prof_api_jpeg.txt"
    cat "$out/prof_api_jpeg.txt"
    ;;
  convfusion)  # issue 24 item 5: cuDNN runtime fusion around ResNet-50's convolutions (no build needed)
    w=$(ls .gpu-deps/wheels/nvidia_cudnn_frontend-*.whl 2>/dev/null | head -1)
    [ -n "$w" ] || { echo "no cudnn-frontend wheel in .gpu-deps/wheels (scripts/offline/fetch-debs.sh)"; exit 1; }
    rm -rf /tmp/cudnn_frontend && python3 -m zipfile -e "$w" /tmp/cudnn_frontend
    PYTHONPATH=/tmp/cudnn_frontend python3 scripts/probes/conv_bn_fusion.py ${ONLY:+--only $ONLY} \
      --json "$out/conv_bn_fusion.json" 2>&1 | tee "$out/conv_bn_fusion.txt"
    ;;
  vitequiv)
    seeds=(${SEEDS:-0 1 2})
    vit=(--config configs/bench.yaml --set model.name=vit_tiny_patch16_224 --set model.num_classes=100
         --set model.channels_last=false --set data.synthetic_samples=4096 --set train.epochs=19
         --set optim.name=adamw --set optim.lr=0.001 --set optim.weight_decay=0.05 --set optim.schedule=cosine
         --set optim.warmup_epochs=2 --set train.eval_interval=0 --set run.log_interval=8
         --set checkpoint.every_epoch=false --set run.out_dir=/tmp/vitequiv)  # weights stay there
    rm -rf /tmp/vitequiv
    for seed in "${seeds[@]}"; do
      $T "${vit[@]}" --set run.seed=$seed --set model.fused_norm=off --set run.name=off_seed$seed > /dev/null 2>&1
    done
    $T "${vit[@]}" --set run.seed=${seeds[0]} --set run.name=fused_seed${seeds[0]} > /dev/null 2>&1
    mkdir -p "$out/eq"
    for d in /tmp/vitequiv/*/; do cp "$d/metrics.jsonl" "$out/eq/$(basename "$d").metrics.jsonl"; done
    m() { echo "$out/eq/$1.metrics.jsonl"; }
    others=(); for seed in "${seeds[@]:1}"; do others+=("$(m off_seed$seed)"); done
    python3 scripts/compare_runs.py "$(m off_seed${seeds[0]})" "${others[@]}" "$(m fused_seed${seeds[0]})" \
      --json "$out/eq/compare.json" | tee "$out/eq/compare.txt"
    ;;
esac
