#!/usr/bin/env bash
# run124: mosaics on the GPU (issue 28), what slows the step beside them. One call: build, pack, e2e in turns
# (folder gpu, m16, m16 + captured step), the captured synthetic, a profile of m16 against
# synthetic, PyTorch reference.
set -uo pipefail
O=$OUT/run124; mkdir -p $O
pack() { tar czf $OUT/run124.tgz -C $OUT run124 2>/dev/null; }
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $O/phases.txt; }
nvidia-smi --query-gpu=name,memory.total --format=csv > $O/gpu.txt 2>&1; cat $O/gpu.txt
lscpu > $O/lscpu.txt 2>&1; grep -E '^(Thread|Core|Socket|Model name|CPU\(s\)|NUMA node)' $O/lscpu.txt
source .gpu-deps/install-debs.sh > /dev/null
stamp build
(python3 scripts/make_imagenet_like.py .gpu-deps/photos data/imagenet_like --train 4000 --val 500 > $O/dataset.txt 2>&1) &
(cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_BUILD_TESTS=ON > $O/cmake.log 2>&1 &&
 cmake --build build --target trainer --parallel $(nproc) > $O/build.log 2>&1) || { tail -n 30 $O/build.log; pack; exit 1; }
wait
T=build/apps/trainer/trainer
stamp pack
$T pack --src data/imagenet_like/train --out data/imagenet_like_stdshards/train --huffman standard > $O/pack_standard.log 2>&1 || tail -5 $O/pack_standard.log
S=data.source=shards,data.root=data/imagenet_like_stdshards,data.eval_split=
stamp turns
ROUNDS=2 MODEL=resnet18 VARIANTS="base $S,data.gpu_decode_mosaic=16 $S,data.gpu_decode_mosaic=16,train.cuda_graph=true" \
  timeout 110 scripts/offline/host-session.sh turns $O/turns 2>&1 | sed 's/data_source_shards_data_root_data_imagenet_like_stdshards_data_eval_split__//' | tail -n 12
$T bench --config configs/imagenet_like.yaml --set bench.warmup_steps=40 --set bench.steps=200 --set model.name=resnet18 \
  --set train.cuda_graph=true --out $O/turns/bench/resnet18_synthetic_graph.json 2>&1 | grep "bench resnet18"
pack
stamp prof
EXTRA="data.source=shards data.root=data/imagenet_like_stdshards data.gpu_decode_mosaic=16" timeout 120 \
  scripts/offline/host-session.sh prof $O/prof 2>&1 | tail -n 40
pack
stamp pytorch
timeout 120 scripts/bench.sh $O/pytorch resnet18 bf16 256 224 100 > $O/pytorch.txt 2>&1; tail -n 6 $O/pytorch.txt
stamp done
pack
