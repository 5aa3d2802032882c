// The run folder: <run.out_dir>/<run.name>/ holding config.yaml (resolved), train.log, metrics.jsonl and the
// weights. Created only after the config validated; checked for writability before training starts.
#pragma once
#include <fstream>
#include <string>

#include "config/config.h"

namespace trainer {

class RunDir {
 public:
  // Creates the folder (rank 0 only writes), saves the resolved config, opens the log file.
  RunDir(const Config& cfg, bool writer);
  ~RunDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const;
  // Appends one JSON object (a complete line) to metrics.jsonl; no-op on non-writer ranks.
  void append_metrics(const std::string& json_line);
  bool writer() const { return writer_; }

 private:
  std::string path_;
  bool writer_;
  std::ofstream metrics_;
};

}  // namespace trainer
