// The run folder: <run.out_dir>/<run.name>/ holding config.yaml (resolved), train.log, metrics.jsonl and the
// weights, and a TensorBoard event file. Created only after the config validated; checked for writability before
// training starts. A fresh run never writes into a folder that holds another run's files: it takes the first free
// <run.name>-2, -3, ... beside it and says so.
#pragma once
#include <fstream>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/config.h"

namespace trainer {

class EventWriter;

// One metrics.jsonl record, built key by key in this order: {"kind":..,"step":..,"epoch":..,<added keys>}.
// Numbers keep 9 significant digits; a non-finite one (a diverged loss) is written as null, so every line parses.
class MetricsRow {
 public:
  MetricsRow(const std::string& kind, int64_t step, int64_t epoch);
  MetricsRow& add(const std::string& key, double value);
  template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  MetricsRow& add(const std::string& key, T value) {
    return add_integer(key, static_cast<long long>(value));
  }
  std::string line() const { return text_ + "}"; }

 private:
  MetricsRow& add_integer(const std::string& key, long long value);
  std::string text_;
};

class RunDir {
 public:
  enum class Start {
    fresh,    // a new run: beside the folder when that is not empty
    restart,  // --resume auto found no checkpoint: the folder's run starts over in it, unless it finished
              // (model.safetensors), then beside it
    resume,   // from a checkpoint of this folder's run: in it
  };
  // Creates the folder (rank 0 only writes), saves the resolved config, opens the log file.
  RunDir(const Config& cfg, bool writer, Start start = Start::fresh);
  ~RunDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const;
  // Appends one JSON object (a complete line) to metrics.jsonl; no-op on non-writer ranks.
  void append_metrics(const std::string& json_line);
  // Scalars to the TensorBoard event file (run.tensorboard); no-op on non-writer ranks.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // The run goes on from `step` (a resume or a restart): metrics.jsonl rows of later steps, which it trains again,
  // move to metrics_superseded.jsonl, and TensorBoard is told to drop its events after `step`.
  void supersede_after(int64_t step);
  bool writer() const { return writer_; }

 private:
  std::string path_;
  bool writer_;
  std::ofstream metrics_;
  std::unique_ptr<EventWriter> events_;
};

// The "step" of one metrics.jsonl row; -1 when it has none.
int64_t metrics_row_step(const std::string& json_line);

}  // namespace trainer
