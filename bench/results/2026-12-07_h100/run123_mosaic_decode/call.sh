#!/usr/bin/env bash
# run123: mosaics on the GPU (issue 28). One call: build, probe, GPU tests, e2e in turns, PyTorch reference.
set -uo pipefail
O=$OUT/run123; mkdir -p $O
pack() { tar czf $OUT/run123.tgz -C $OUT run123 2>/dev/null; }
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $O/phases.txt; }
nvidia-smi --query-gpu=name,memory.total --format=csv > $O/gpu.txt 2>&1
source .gpu-deps/install-debs.sh > /dev/null
stamp build
(cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_BUILD_TESTS=ON > $O/cmake.log 2>&1 &&
 cmake --build build --target trainer data_gpu_test --parallel $(nproc) > $O/build.log 2>&1) || { tail -n 30 $O/build.log; pack; exit 1; }
(python3 scripts/make_imagenet_like.py .gpu-deps/photos data/imagenet_like --train 4000 --val 500 > $O/dataset.txt 2>&1) &
export PATH=/usr/local/cuda/bin:$PATH
C=/usr/local/cuda/targets/x86_64-linux/lib
nvcc -O2 -std=c++17 -I/usr/local/cuda/include -Ilib/data -Ilib/core scripts/probes/nvjpeg_call.cu lib/data/data/jpeg_mosaic.cpp \
  lib/data/data/jpeg_cut.cpp lib/data/data/jpeg_encoder.cpp lib/core/core/check.cpp lib/core/core/strings.cpp \
  -L$C -L$C/stubs -Xlinker -rpath -Xlinker $C -lnvjpeg -lcupti -lcuda -ljpeg -lpthread -o /tmp/nvjpeg_call > $O/probe_build.log 2>&1
wait
stamp probe
P="ALLOCS=default THREADS=1 SPINS=0 CALLS=32 COUNT=1"
env $P MOSAIC=0 timeout 60 /tmp/nvjpeg_call data/imagenet_like/train 0 none sm > $O/probe_originals.txt 2>&1
env $P MOSAIC="0 8 16 32" timeout 90 /tmp/nvjpeg_call data/imagenet_like/train 0 none sm > $O/probe_mosaic.txt 2>&1
grep -E "img/s|mosaics|CUDA calls|rewritten" $O/probe_*.txt | cut -c1-260
pack
stamp gputest
timeout 150 build/tests/data/data_gpu_test --gtest_filter='GpuDecode.*' > $O/gpu_test.log 2>&1
grep -E "^  (training|evaluation)|OK \]|FAILED|Failure" $O/gpu_test.log | head -40
pack
stamp e2e
MODELS=resnet18 DECODES="gpu stdshards_m0 stdshards_m16 stdshards_m0 stdshards_m16" timeout 240 \
  scripts/offline/host-session.sh e2e $O/e2e 2>&1 | tail -n 20
pack
stamp pytorch
timeout 170 scripts/bench.sh $O/pytorch resnet18 bf16 256 224 100 > $O/pytorch.txt 2>&1; tail -n 6 $O/pytorch.txt
stamp done
pack
