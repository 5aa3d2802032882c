// Where the step time went, and what to change: verdicts drawn from an epoch's timings.
//   input-bound   the loop waited for batches >= 10% of the epoch and, on a GPU, the GPU had run dry before the
//                 batch came in >= 10% of steps (a loader that launches its work on the training stream waits in
//                 a full launch queue behind a busy GPU: that wait is the GPU's pace, not the input's); with the
//                 pipeline stage that set the pace and its figures where the loader timed its stages
//   copy-bound    host-to-device copies (GPU events on the copy stream) took >= 90% of the compute time, so the
//                 side stream can no longer hide them
//   launch-bound  the GPU had finished all queued work when the host came back for the next batch in >= 50% of
//                 steps (a non-blocking event query at each step boundary): the host, not the GPU, sets the pace
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct EpochTimings {
  int64_t images = 0;        // this rank
  int64_t steps = 0;         // train steps (micro-batches) timed
  double wall_s = 0;         // the epoch's wall time
  double data_wait_s = 0;    // host time blocked on the input pipeline
  double copy_s = -1;        // GPU time of host-to-device copies; < 0: not measured (CPU, GPU-resident data)
  int64_t drained_steps = -1;  // steps at whose start the GPU was idle; < 0: not measured (CPU)
  int64_t starved_steps = -1;  // steps whose batch came after the GPU had finished all queued work; < 0: not measured
  // input-bound: what set the pipeline's pace, with figures, and what to change for it (data/pipeline_report.h);
  // empty: not known, the verdict gives the general advice
  std::string input_limit, input_advice;
};

std::vector<std::string> bottleneck_verdicts(const EpochTimings& t);

}  // namespace trainer
