#!/usr/bin/env bash
# Multi-GPU measurements on one host with several GPUs (the scaling issue), in phases that each fit a call:
#   bench  ResNet-50 bf16 bs 256 synthetic: 1 GPU, then N GPUs through `trainer launch`, torchrun --no-python and
#          mpirun; overlap off; bf16 gradients; accumulation 4; PyTorch eager 1 GPU and DDP on N GPUs (torchrun)
#   e2e    the same model from the ImageNet-like JPEGs on 1 and N GPUs
#   overlap  a Chrome trace of two N-GPU training steps; how much of the NCCL kernel time ran alongside compute
#   check  Fashion-MNIST: N x 256 against 1 x 256 with accumulation N (loss curves); kill one rank mid-run,
#          then resume its checkpoint on one GPU
# usage: scripts/offline/multi-gpu.sh PHASE OUTDIR [NGPU]
set -uo pipefail
phase=$1 out=$2 n=${3:-2}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
source .gpu-deps/install-debs.sh > /dev/null
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on these hosts
T=$root/build/apps/trainer/trainer
o=$out/multi
mkdir -p "$o"
port=29700
next_port() { port=$((port + 7)); }
case "$phase" in
  bench)
    B=(bench --config configs/bench.yaml --set model.name=resnet50 --set train.precision=bf16
       --set data.batch_size=256 --set bench.steps=100)
    run() {  # name, command...
      local name=$1; shift
      "$@" > "$o/$name.log" 2>&1 || { echo "$name failed:"; tail -20 "$o/$name.log"; }
      grep -h "bench resnet50\|img_per_s\"" "$o/$name.log" | head -1
    }
    run t_1gpu "$T" "${B[@]}" --out "$o/t_1gpu.json"
    next_port; run t_${n}gpu_launch "$T" launch --nproc-per-node "$n" --master-port $port -- "${B[@]}" --out "$o/t_${n}gpu_launch.json"
    next_port; run t_${n}gpu_torchrun torchrun --nproc-per-node "$n" --master-port $port --no-python "$T" "${B[@]}" \
      --out "$o/t_${n}gpu_torchrun.json"
    next_port; run t_${n}gpu_mpirun mpirun --allow-run-as-root -np "$n" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=$port \
      -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$T" "${B[@]}" --out "$o/t_${n}gpu_mpirun.json"
    next_port; run t_${n}gpu_nooverlap "$T" launch --nproc-per-node "$n" --master-port $port -- "${B[@]}" \
      --set dist.overlap=false --out "$o/t_${n}gpu_nooverlap.json"
    next_port; run t_${n}gpu_bf16grad "$T" launch --nproc-per-node "$n" --master-port $port -- "${B[@]}" \
      --set dist.grad_compression=bf16 --out "$o/t_${n}gpu_bf16grad.json"
    run t_1gpu_accum4 "$T" "${B[@]}" --set train.accum_steps=4 --set bench.steps=25 --out "$o/t_1gpu_accum4.json"
    next_port; run t_${n}gpu_accum4 "$T" launch --nproc-per-node "$n" --master-port $port -- "${B[@]}" \
      --set train.accum_steps=4 --set bench.steps=25 --out "$o/t_${n}gpu_accum4.json"
    run pt_1gpu python3 scripts/bench_pytorch.py --model resnet50 --precision bf16 --channels-last --out "$o/pt_1gpu.json"
    next_port; run pt_${n}gpu_ddp torchrun --nproc-per-node "$n" --master-port $port scripts/bench_pytorch.py \
      --model resnet50 --precision bf16 --channels-last --out "$o/pt_${n}gpu_ddp.json"
    python3 - "$o" "$n" <<'PY'
import json, os, sys
o, n = sys.argv[1], int(sys.argv[2])
def rate(name):
    p = f"{o}/{name}.json"
    return json.load(open(p))["img_per_s"] if os.path.exists(p) else float("nan")
one, pt1 = rate("t_1gpu"), rate("pt_1gpu")
rows = [("trainer 1 GPU", one, 1), ("pytorch eager 1 GPU", pt1, 1)]
for tag in ("launch", "torchrun", "mpirun", "nooverlap", "bf16grad"):
    rows.append((f"trainer {n} GPU {tag}", rate(f"t_{n}gpu_{tag}"), n))
rows.append((f"pytorch DDP {n} GPU", rate(f"pt_{n}gpu_ddp"), n))
for name, r, k in rows:
    base = pt1 if name.startswith("pytorch") else one
    print(f"{name:32s} {r:8.0f} img/s   scaling efficiency {r / (k * base):.3f}")
a1, an = rate("t_1gpu_accum4"), rate(f"t_{n}gpu_accum4")
print(f"{'trainer accum4 1 GPU':32s} {a1:8.0f} img/s")
print(f"{f'trainer accum4 {n} GPU':32s} {an:8.0f} img/s   scaling efficiency {an / (n * a1):.3f}")
print(f"trainer {n} GPU / pytorch DDP {n} GPU: {rate(f't_{n}gpu_launch') / rate(f'pt_{n}gpu_ddp'):.3f}")
PY
    ;;
  e2e)
    [ -d data/imagenet_like ] || python3 scripts/make_imagenet_like.py .gpu-deps/photos data/imagenet_like \
      --train 8000 --val 500 | tee "$o/dataset.txt"
    E=(--config configs/imagenet_like.yaml --set train.epochs=6 --set run.log_interval=5 --set run.name=r)
    "$T" "${E[@]}" --set run.out_dir="$o/e2e_1gpu" > "$o/e2e_1gpu.log" 2>&1
    grep -h "done in\|weights identical\|error" "$o/e2e_1gpu.log"
    next_port; "$T" launch --nproc-per-node "$n" --master-port $port -- "${E[@]}" --set run.out_dir="$o/e2e_${n}gpu" \
      > "$o/e2e_${n}gpu.log" 2>&1
    grep -h "\[0\].*done in\|weights identical\|error" "$o/e2e_${n}gpu.log"
    ;;
  overlap)
    next_port
    "$T" launch --nproc-per-node "$n" --master-port $port -- --config configs/bench.yaml --set run.name=r \
      --set run.out_dir="$o/overlap" --set data.synthetic_samples=16384 --set train.epochs=1 --set train.max_steps=24 \
      --set train.eval_interval=0 --set data.eval_split= --set checkpoint.every_epoch=false --set run.log_interval=8 \
      --profile 20:22 > "$o/overlap.log" 2>&1 || tail -20 "$o/overlap.log"
    grep -h "\[0\].*step 16\|profiler\|identical" "$o/overlap.log"
    python3 scripts/trace_overlap.py "$o/overlap/r/trace.json" | tee "$o/overlap.txt"
    ;;
  check)
    F=(--config configs/fashion_mnist.yaml --set data.root="$TRAINER_FMNIST" --set train.epochs=4
       --set run.log_interval=10 --set train.eval_interval=1 --set run.name=r)
    "$T" "${F[@]}" --set data.batch_size=256 --set train.accum_steps="$n" --set run.out_dir="$o/fm_1x256_accum$n" \
      > "$o/fm_1gpu_accum.log" 2>&1
    next_port; "$T" launch --nproc-per-node "$n" --master-port $port -- "${F[@]}" --set data.batch_size=256 \
      --set run.out_dir="$o/fm_${n}x256" > "$o/fm_${n}gpu.log" 2>&1
    grep -h "weights identical" "$o/fm_${n}gpu.log"
    python3 - "$o/fm_1x256_accum$n/r/metrics.jsonl" "$o/fm_${n}x256/r/metrics.jsonl" <<'PY'
import json, sys
def read(p):
    rows = [json.loads(l) for l in open(p)]
    return ({r["step"]: r["loss"] for r in rows if r["kind"] == "train"},
            [r["top1"] for r in rows if r["kind"] == "eval"])
(a, ea), (b, eb) = read(sys.argv[1]), read(sys.argv[2])
steps = sorted(set(a) & set(b))
d = [abs(a[s] - b[s]) / a[s] for s in steps]
print(f"loss curves over {len(steps)} points: mean rel diff {sum(d)/len(d):.4f}, max {max(d):.4f}; "
      f"final loss {a[steps[-1]]:.4f} vs {b[steps[-1]]:.4f}; eval top1 per epoch {ea} vs {eb}")
PY
    # a rank killed mid-run: the job must end, name the failure, and leave a checkpoint that resumes on 1 GPU
    next_port
    start=$(date +%s)
    "$T" launch --nproc-per-node "$n" --master-port $port -- "${F[@]}" --set train.epochs=60 \
      --set checkpoint.every_steps=50 --set run.dist_timeout_s=60 --set run.out_dir="$o/fault" \
      > "$o/fault.log" 2>&1 &
    lpid=$!
    for _ in $(seq 1 120); do
      [ "$(ls "$o/fault/r/checkpoints" 2>/dev/null | wc -l)" -ge 2 ] && break
      sleep 0.5
    done
    for p in $(pgrep -f "$T"); do
      tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "RANK=1" && { kill -9 "$p"; echo "killed rank 1 (pid $p)"; }
    done
    killed=$(date +%s)
    wait $lpid; rc=$?
    echo "launcher exit code $rc, $(( $(date +%s) - killed )) s after the kill"
    grep -h "exited\|signal\|error\|rank" "$o/fault.log" | grep -v "joined\|img/s" | tail -6
    ls "$o/fault/r/checkpoints"
    "$T" "${F[@]}" --set train.epochs=60 --set run.out_dir="$o/fault" --set checkpoint.resume=auto \
      > "$o/fault_resume_1gpu.log" 2>&1; echo "resume on 1 GPU: exit $?"
    grep -h "resumed\|written by\|trained" "$o/fault_resume_1gpu.log"
    ;;
esac
