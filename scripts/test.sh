#!/usr/bin/env bash
# The README's test command: set up, build, and run every test (GPU-labelled tests skip without a GPU).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "${TRAINER_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "$(nproc)" "$@"
