#!/usr/bin/env bash
# The README's first command: set up, build, and train the built-in default (Fashion-MNIST, ResNet-18 with a
# small-image stem, 30 epochs) on the GPU if there is one. Without a GPU it trains a short version (5,000
# images, 2 epochs: a few minutes on 2 cores) so that it finishes. Extra arguments go to trainer.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "$root"
args=()
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "quickstart: no GPU found: training a short CPU version of the default recipe"
  args=(--set run.device=cpu --set data.train_limit=5000 --set data.eval_limit=2000 --set data.batch_size=64
        --set train.epochs=2 --set optim.name=adamw --set optim.lr=0.002 --set optim.weight_decay=0.05
        --set optim.warmup_epochs=0.2 --set train.eval_interval=1
        --set run.log_interval=20)
fi
exec "${TRAINER_BUILD_DIR:-$root/build}/apps/trainer/trainer" "${args[@]}" "$@"
