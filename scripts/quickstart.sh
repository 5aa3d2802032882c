#!/usr/bin/env bash
# The README's first command: set up, build, and train the built-in default (Fashion-MNIST, ResNet-18 with a
# small-image stem) on the GPU if there is one, else on the CPU. Extra arguments go to trainer.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "$root"
exec "${TRAINER_BUILD_DIR:-$root/build}/apps/trainer/trainer" "$@"
