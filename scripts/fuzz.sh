#!/usr/bin/env bash
# Real fuzzing with libFuzzer + AddressSanitizer (clang from Debian: apt install clang libclang-rt-14-dev).
# Builds build-fuzz/ with clang and one fuzz_<target> binary per target, seeds a corpus with the generated seeds
# (fuzz_smoke writes them), and runs each target for SECONDS (default 60). Crashes land in build-fuzz/crashes/.
# usage: scripts/fuzz.sh [SECONDS] [TARGET...]     targets: jpeg png idx cifar safetensors checkpoint tfrecord list tar shard_index config
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${1:-60}; shift || true
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(jpeg png idx cifar safetensors checkpoint tfrecord list tar shard_index config)
b="$root/build-fuzz"
CC=clang CXX=clang++ cmake -S "$root" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINER_LIBFUZZER=ON \
  -DTRAINER_USE_PCH=OFF > /dev/null
cmake --build "$b" --parallel "$(nproc)" --target fuzz_smoke $(printf 'fuzz_%s ' "${targets[@]}")
mkdir -p "$b/crashes"
for t in "${targets[@]}"; do
  "$b/tests/fuzz/fuzz_smoke" "$t" 0 --corpus "$b/corpus/$t" > /dev/null
  (cd "$b/crashes" && "$b/tests/fuzz/fuzz_$t" -max_total_time="$secs" -rss_limit_mb=8192 -timeout=10 \
     "$b/corpus/$t") 2>&1 | grep -E "^#[0-9]+ +DONE|ERROR|SUMMARY|Done [0-9]+ runs" || true
done
