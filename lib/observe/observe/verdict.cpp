#include "observe/verdict.h"

#include <algorithm>

#include "core/strings.h"

namespace trainer {

std::vector<std::string> bottleneck_verdicts(const EpochTimings& t) {
  std::vector<std::string> out;
  if (t.wall_s <= 0 || t.steps <= 0) return out;
  const double compute_s = std::max(t.wall_s - t.data_wait_s, 1e-9);
  const bool gpu_waited = t.starved_steps < 0 || t.starved_steps * 10 >= t.steps;  // unmeasured: take the wait
  if (t.data_wait_s >= 0.10 * t.wall_s && gpu_waited) {
    // the compute side could take images / (epoch - wait) per second; the pipeline delivered images / epoch
    std::string v = strprintf(
        "input-bound: %.0f%% of the epoch waited for data; the pipeline delivered %.0f img/s, the model could "
        "train %.0f img/s. ",
        100.0 * t.data_wait_s / t.wall_s, t.images / t.wall_s, t.images / compute_s);
    if (!t.input_limit.empty())  // the loader said which of its stages set the pace
      v += "What sets it: " + t.input_limit + ". What to change: " + t.input_advice + ".";
    else
      v += "Try data.decode: gpu (or auto, which picks by measuring); where the decoded images fit in RAM, "
           "data.cache: decoded with data.cache_gb (later epochs only crop and resize); more decode threads "
           "(data.workers), data.crop_decode and data.dct_scale on, JPEGs packed into shards (trainer pack: restart "
           "markers, about 30% less decode time, same pixels; --max-side for smaller images).";
    out.push_back(v);
  }
  if (t.copy_s >= 0.90 * compute_s) {
    out.push_back(strprintf(
        "copy-bound: host-to-device copies took %.1f ms per batch against %.1f ms of compute; the copy stream "
        "cannot hide them. Send uint8 (not float) batches, keep them pinned, or decode on the GPU.",
        1e3 * t.copy_s / t.steps, 1e3 * compute_s / t.steps));
  }
  if (t.drained_steps >= 0 && t.drained_steps * 2 >= t.steps && t.data_wait_s < 0.10 * t.wall_s) {
    out.push_back(strprintf(
        "launch-bound: in %.0f%% of steps the GPU had finished all queued work before the host issued the next "
        "one: host-side overhead sets the pace. Use a larger batch, channels_last, fewer small ops (fused "
        "optimizer), or fewer log/eval syncs.",
        100.0 * t.drained_steps / t.steps));
  }
  return out;
}

}  // namespace trainer
