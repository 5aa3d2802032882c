// The GPU decode path's share of an epoch in one log line (the run log's end of epoch): what nvJPEG and the CPU
// threads decoded, the hybrid share, and the loader's side-stream time per batch beside the step's, which is the
// GPU time the data path runs concurrently with training (issue 28: what it takes from the step).
#pragma once
#include <string>

#include "data/loader.h"

namespace trainer {

// The epoch's part of the counters (now minus at its start); empty when no batch was timed in it. step_ms: the
// epoch's wall time per step.
std::string gpu_decode_report(const GpuDecodeStats& now, const GpuDecodeStats& at_start, double step_ms);

}  // namespace trainer
