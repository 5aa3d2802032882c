#!/usr/bin/env bash
# On a networked Debian machine, from the project root: gathers what the offline GPU host lacks into
# .gpu-deps/ (git-ignored): the OpenCV core+imgproc and TurboJPEG .deb files with their runtime needs, a copy of
# Fashion-MNIST (Debian's dataset-fashion-mnist) for the default run, photographs for the benchmark set and the
# cudnn-frontend wheel for the fusion probe. Take .gpu-deps along with the
# source tree and run scripts/offline/build-on-host.sh there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest="$root/.gpu-deps"
mkdir -p "$dest/datasets"
pkgs=(libopencv-core406 libopencv-imgproc406 libopencv-core-dev libopencv-imgproc-dev
      libtbb12 libtbb-dev libtbbmalloc2 libblas3 liblapack3 libgfortran5
      libturbojpeg0 libturbojpeg0-dev libglx0 libglvnd0 libglx-mesa0 nlohmann-json3-dev libgloo-dev)
[ -n "$(ls /var/lib/apt/lists/*Packages 2>/dev/null | head -1)" ] || apt-get update -qq
(cd "$dest" && apt-get download -q "${pkgs[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
cp "$root/scripts/offline/install-debs.sh" "$dest/"
if [ -d /usr/share/datasets/fashion-mnist ]; then
  cp -r /usr/share/datasets/fashion-mnist "$dest/datasets/"
else
  echo "fetch-debs: note: dataset-fashion-mnist is not installed; the default run will lack its data"
fi
# real photographs for the ImageNet-like benchmark set (scripts/make_imagenet_like.py runs on the host)
mkdir -p "$dest/photos"
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download -q mate-backgrounds 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
dpkg -x "$tmp"/mate-backgrounds_*.deb "$tmp/x" && cp "$tmp"/x/usr/share/backgrounds/mate/nature/*.jpg "$dest/photos/"
rm -rf "$tmp"
# cuDNN's frontend (Python bindings + its header-only C++ API, no dependencies) for the host's Python 3.12: the
# convolution-fusion probe (scripts/probes/conv_bn_fusion.py) builds cuDNN runtime-fusion graphs through it
pip=("$root/.venv/bin/python" -m pip); [ -x "$root/.venv/bin/python" ] || pip=(python3 -m pip)
"${pip[@]}" download -q nvidia-cudnn-frontend==1.14.0 --no-deps --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --only-binary=:all: -d "$dest/wheels" ||
  echo "fetch-debs: note: the cudnn-frontend wheel could not be fetched; the fusion probe will not run"
du -sh "$dest"
