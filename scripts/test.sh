#!/usr/bin/env bash
# The README's test command: set up, build, and run every test (GPU-labelled tests skip without a GPU).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "${TRAINER_BUILD_DIR:-$root/build}"
# ctest runs nproc tests at once: one OpenMP thread each, or every test's team (as large as the machine) spins
# against the others' (the CPU parity and training tests ran 3-5x slower side by side)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
ctest --output-on-failure -j "$(nproc)" "$@"
