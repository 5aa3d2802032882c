#!/usr/bin/env bash
# Installs what trainer needs on Debian/Ubuntu, idempotently and quietly when everything is there:
#   1. the system packages (compiler, CMake, OpenCV core+imgproc, libjpeg-turbo, yaml-cpp, spdlog, GoogleTest, ...)
#   2. a Python venv in .venv holding torch==2.11.0 (LibTorch for the build) and the test-time packages.
# TRAINER_SYSTEM_TORCH=1 uses the python3 on PATH when it already has torch 2.11 (the offline GPU host).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

apt_pkgs=(build-essential cmake ninja-build git pkg-config python3 python3-venv python3-pip
          libyaml-cpp-dev libspdlog-dev libgtest-dev nlohmann-json3-dev libgloo-dev
          libopencv-core-dev libopencv-imgproc-dev libturbojpeg0-dev libjpeg-dev libpng-dev zlib1g-dev
          iproute2)  # iproute2: the two-host test (network namespaces; it skips without root)
optional_pkgs=(dataset-fashion-mnist)   # the default run's data; absent from some distributions

missing=()
for p in "${apt_pkgs[@]}" "${optional_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  for p in "${optional_pkgs[@]}"; do
    if [[ " ${missing[*]} " == *" $p "* ]] && ! apt-cache show "$p" >/dev/null 2>&1; then
      echo "setup: note: $p is not available here; the default Fashion-MNIST run needs it"
      missing=("${missing[@]/$p}")
    fi
  done
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends ${missing[*]} >/dev/null
fi

if [ "${TRAINER_SYSTEM_TORCH:-0}" = "1" ]; then
  python3 -c 'import torch; assert torch.__version__.startswith("2.11"), torch.__version__' \
    || { echo "setup: TRAINER_SYSTEM_TORCH=1 but python3 has no torch 2.11" >&2; exit 1; }
  exit 0
fi

req="$root/scripts/requirements.txt"
stamp="$root/.venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x "$root/.venv/bin/python3" ]; then
  echo "setup: creating .venv"
  python3 -m venv "$root/.venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python packages into .venv (torch 2.11.0 is large: a few minutes)"
  "$root/.venv/bin/python3" -m pip install -q --upgrade pip
  "$root/.venv/bin/python3" -m pip install -q -r "$req"
  echo "$want" > "$stamp"
fi
