#include "engine/profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include "core/check.h"
#include "core/log.h"
#include "core/strings.h"
#include "runtime/env.h"

namespace trainer {

ProfileRange parse_profile_range(const std::string& spec) {
  ProfileRange r;
  if (spec.empty()) return r;
  const auto parts = split(spec, ':');
  auto number = [&](const std::string& s) {
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < 0)
      throw ConfigError(str_cat("run.profile: expected START:END (optimizer steps, 0 <= START < END), got '", spec, "'"));
    return static_cast<int64_t>(v);
  };
  if (parts.size() != 2) number("");
  r.start = number(parts[0]);
  r.end = number(parts[1]);
  if (r.end <= r.start) number("");
  return r;
}

StepProfiler::StepProfiler(ProfileRange range, std::string trace_path, torch::Device device)
    : range_(range), path_(std::move(trace_path)), device_(device) {}

StepProfiler::~StepProfiler() {
  try {
    finish();
  } catch (const std::exception& e) {
    log::warn("profiler: ", e.what());
  }
}

void StepProfiler::at_step(int64_t step) {
  if (!range_.on() || written_) return;
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  if (!running_ && step >= range_.start && step < range_.end) {
    const torch::profiler::impl::ProfilerConfig cfg(torch::profiler::impl::ProfilerState::KINETO);
    std::set<ActivityType> acts{ActivityType::CPU};
    if (device_.is_cuda()) acts.insert(ActivityType::CUDA);
    prof::prepareProfiler(cfg, acts);
    prof::enableProfiler(cfg, acts);
    running_ = true;
    log::info("profiler: recording steps ", range_.start, " to ", range_.end - 1);
  } else if (running_ && step >= range_.end) {
    finish();
  }
}

void StepProfiler::finish() {
  if (!running_) return;
  running_ = false;
  synchronize(device_);  // the recorded steps' kernels are still queued: let them run before the trace closes
  auto result = torch::autograd::profiler::disableProfiler();
  result->save(path_);
  written_ = true;
  log::info("profiler: Chrome trace in ", path_, " (open in chrome://tracing or ui.perfetto.dev)");
}

}  // namespace trainer
