// The run folder: <run.out_dir>/<run.name>/ holding config.yaml (resolved), train.log, metrics.jsonl and the
// weights, and a TensorBoard event file. Created only after the config validated; checked for writability before training starts.
#pragma once
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"

namespace trainer {

class EventWriter;

class RunDir {
 public:
  // Creates the folder (rank 0 only writes), saves the resolved config, opens the log file.
  RunDir(const Config& cfg, bool writer);
  ~RunDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const;
  // Appends one JSON object (a complete line) to metrics.jsonl; no-op on non-writer ranks.
  void append_metrics(const std::string& json_line);
  // Scalars to the TensorBoard event file (run.tensorboard); no-op on non-writer ranks.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  bool writer() const { return writer_; }

 private:
  std::string path_;
  bool writer_;
  std::ofstream metrics_;
  std::unique_ptr<EventWriter> events_;
};

}  // namespace trainer
