#include "engine/run_dir.h"

#include <cmath>
#include <cstdlib>

#include "core/check.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/strings.h"
#include "observe/tfevents.h"

namespace trainer {
namespace {

bool holds_files(const std::string& dir) { return fs::is_dir(dir) && !fs::list_dir(dir).empty(); }

// Where a run starting as `start` writes: the named folder, or the first free one beside it.
std::string choose_folder(const std::string& named, RunDir::Start start) {
  if (start == RunDir::Start::resume || !holds_files(named)) return named;
  if (start == RunDir::Start::restart && !fs::exists(fs::join_path(named, "model.safetensors"))) {
    log::warn("resume auto: no checkpoint in ", named, "; its run starts over there (its metrics rows move to ",
              "metrics_superseded.jsonl)");
    return named;
  }
  for (int n = 2;; ++n) {
    const std::string beside = str_cat(named, "-", n);
    if (holds_files(beside)) continue;
    log::warn("the run folder ", named, " holds another run's files, which this ",
              start == RunDir::Start::restart ? "run (nothing to resume there) " : "fresh run ", "leaves alone: it ",
              "writes to ", beside, " (to continue that run: --resume auto; to choose the folder: run.name)");
    return beside;
  }
}

}  // namespace

int64_t metrics_row_step(const std::string& line) {
  const size_t at = line.find("\"step\":");
  if (at == std::string::npos) return -1;
  const char* p = line.c_str() + at + 7;
  char* end = nullptr;
  const long long v = std::strtoll(p, &end, 10);
  return end == p ? -1 : static_cast<int64_t>(v);
}

RunDir::RunDir(const Config& cfg, bool writer, Start start) : writer_(writer) {
  path_ = fs::join_path(cfg.run.out_dir, cfg.run.name);
  if (!writer_) return;
  path_ = choose_folder(path_, start);
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

void RunDir::supersede_after(int64_t step) {
  if (!writer_) return;
  const std::string path = file("metrics.jsonl");
  std::string kept, later;
  for (const auto& line : split(fs::read_text(path), '\n')) {
    if (line.empty()) continue;
    (metrics_row_step(line) > step ? later : kept) += line + "\n";
  }
  if (!later.empty()) {
    std::ofstream old(file("metrics_superseded.jsonl"), std::ios::app);
    old << later;
    old.flush();
    TRAINER_CHECK(old.good(), "cannot write ", file("metrics_superseded.jsonl"), " (metrics.jsonl is unchanged)");
    metrics_.close();
    fs::write_text_atomic(path, kept);
    metrics_.open(path, std::ios::app);
    TRAINER_CHECK(metrics_.good(), "cannot open ", path);
    log::info("metrics.jsonl: the rows after step ", step, ", trained again now, moved to metrics_superseded.jsonl");
  }
  if (events_) events_->session_start(step + 1);
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

MetricsRow::MetricsRow(const std::string& kind, int64_t step, int64_t epoch)
    : text_(strprintf(R"({"kind":"%s","step":%lld,"epoch":%lld)", kind.c_str(), static_cast<long long>(step),
                      static_cast<long long>(epoch))) {}

MetricsRow& MetricsRow::add(const std::string& key, double value) {
  text_ += std::isfinite(value) ? strprintf(R"(,"%s":%.9g)", key.c_str(), value) : strprintf(R"(,"%s":null)", key.c_str());
  return *this;
}

MetricsRow& MetricsRow::add_integer(const std::string& key, long long value) {
  text_ += strprintf(R"(,"%s":%lld)", key.c_str(), value);
  return *this;
}

void RunDir::append_metrics(const std::string& line) {
  if (!writer_) return;
  metrics_ << line << '\n';
  metrics_.flush();
}

}  // namespace trainer
