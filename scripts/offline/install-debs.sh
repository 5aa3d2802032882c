#!/usr/bin/env bash
# Sourced on the offline GPU host: unpacks the carried .deb files into /opt/deps (never into /) and exports
# what CMake and the loader need: CMAKE_PREFIX_PATH = LibTorch (from python3's torch) + /opt/deps/usr.
_d=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p /opt/deps
for f in "$_d"/*.deb; do dpkg -x "$f" /opt/deps; done
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TORCH_CMAKE_PREFIX=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
export CMAKE_PREFIX_PATH="$TORCH_CMAKE_PREFIX:/opt/deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export TRAINER_FMNIST="$_d/datasets/fashion-mnist"
