#!/usr/bin/env bash
# On the offline GPU host (Ubuntu 24.04, CUDA 13, PyTorch 2.11 in python3), from the project root, with
# .gpu-deps/ from fetch-debs.sh beside the sources: unpacks the packages, configures and builds (Release,
# Ninja, tests on). Then: build/apps/trainer/trainer --version; (cd build && ctest -L gpu).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck disable=SC1091
source "$root/.gpu-deps/install-debs.sh"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_BUILD_TESTS=ON
cmake --build "$root/build" --parallel "$(nproc)"
