#include "data/pipeline_report.h"

#include "core/strings.h"

namespace trainer {

std::string gpu_decode_report(const GpuDecodeStats& now, const GpuDecodeStats& at_start, double step_ms) {
  const int64_t batches = now.batches - at_start.batches;
  if (batches <= 0) return {};
  const double decode = (now.decode_ms - at_start.decode_ms) / static_cast<double>(batches);
  const double augment = (now.augment_ms - at_start.augment_ms) / static_cast<double>(batches);
  std::string s = strprintf("GPU decode: %lld images by nvJPEG, %lld by the CPU threads",
                            static_cast<long long>(now.gpu - at_start.gpu),
                            static_cast<long long>((now.cpu_fallback - at_start.cpu_fallback) +
                                                   (now.cpu_hybrid - at_start.cpu_hybrid)));
  if (now.cpu_hybrid > at_start.cpu_hybrid)
    s += strprintf(" (%lld of them the hybrid share, %.2f of a batch now)",
                   static_cast<long long>(now.cpu_hybrid - at_start.cpu_hybrid), now.host_share);
  s += strprintf("; the loader's side stream per batch: decode %.2f ms, crop + resize + normalise %.2f ms", decode,
                 augment);
  if (step_ms > 0) s += strprintf(", beside a %.2f ms step (%.0f%%)", step_ms, 100.0 * (decode + augment) / step_ms);
  return s;
}

}  // namespace trainer
