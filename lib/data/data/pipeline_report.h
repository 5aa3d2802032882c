// Reports on the input pipeline from its counters (loader.h): the GPU decode path's end-of-epoch line, and what set
// the pipeline's pace (the input-bound verdict's figures).
#pragma once
#include <string>

#include "data/loader.h"

namespace trainer {

// The GPU decode path's share of an epoch in one log line (the run log's end of epoch): what nvJPEG and the CPU
// threads decoded, the hybrid share, and the loader's side-stream time per batch beside the step's, which is the
// GPU time the data path runs concurrently with training. From the epoch's part of the counters (now minus at its
// start); empty when no batch was timed in it. step_ms: the epoch's wall time per step.
std::string gpu_decode_report(const GpuDecodeStats& now, const GpuDecodeStats& at_start, double step_ms);

// The counters between two readings of one loader (now minus before): the interval's samples, batches and times.
PipelineStats pipeline_since(const PipelineStats& now, const PipelineStats& before);

// What set the input pipeline's pace over an interval, for the input-bound verdict: the stage named with its
// figures, and what to change for it. Empty when the interval's counters cannot say (nothing made, the path
// changed in it, a loader without stage times).
//   cpu  the decode threads, where they were busy >= 75% of the interval: their time per sample by stage and the
//        rate that gives; the largest stage (reading, decoding, crop-resize) picks the advice
//   gpu  the loader's producer thread, where it was busy >= 75% of the interval: its time per batch, of it the
//        largest part (waiting for the read-ahead, with that split into sizes and buffer, reading, header parsing and
//        the CPU share; the nvJPEG call; the CPU threads' part after it; the crop-resize launches)
// Below 75% the pipeline's own side is named as not the limit, with its figures.
struct InputLimit {
  std::string stage;   // "decode threads", "read-ahead", "nvJPEG call", ...; empty: unknown
  std::string figures;
  std::string advice;
};
InputLimit input_limit(const PipelineStats& interval, double wall_s);

// The same beside training (the end-to-end bench): the loader's stage set the pace only where the step waited for
// its batches; where it waited under 2% of the time the step itself did, and the loader's figures (busy or not) say
// what it did beside it. Its work can still slow the step (its CPU threads beside a host-bound step, its GPU work):
// the advice says how to tell. loader: input_limit over the same interval; unchanged where empty or the wait larger.
InputLimit limit_beside_training(const InputLimit& loader, double data_wait_fraction);

}  // namespace trainer
