#include "engine/run_dir.h"

#include "core/check.h"
#include "core/fs.h"
#include "core/log.h"
#include "observe/tfevents.h"

namespace trainer {

RunDir::RunDir(const Config& cfg, bool writer) : writer_(writer) {
  path_ = fs::join_path(cfg.run.out_dir, cfg.run.name);
  if (!writer_) return;
  try {
    fs::make_dirs(path_);
  } catch (const Error& e) {
    TRAINER_FAIL("cannot create the run folder ", path_, " (run.out_dir/run.name): ", e.what());
  }
  TRAINER_CHECK(fs::is_writable_dir(path_), "the run folder ", path_, " is not writable (hint: set run.out_dir)");
  fs::write_text_atomic(file("config.yaml"), config_to_yaml(cfg));
  log::set_file(file("train.log"));
  metrics_.open(file("metrics.jsonl"), std::ios::app);
  TRAINER_CHECK(metrics_.good(), "cannot open ", file("metrics.jsonl"));
  if (cfg.run.tensorboard) events_ = std::make_unique<EventWriter>(path_);
}

void RunDir::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  if (!events_) return;
  events_->scalars(step, values);
  events_->flush();
}

RunDir::~RunDir() {
  if (writer_) log::set_file("");
}

std::string RunDir::file(const std::string& name) const { return fs::join_path(path_, name); }

void RunDir::append_metrics(const std::string& line) {
  if (!writer_) return;
  metrics_ << line << '\n';
  metrics_.flush();
}

}  // namespace trainer
