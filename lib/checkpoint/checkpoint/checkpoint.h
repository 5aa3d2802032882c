// Checkpoints: every tensor of a run's state (model, optimizer, scaler, RNG) in one safetensors container,
// with metadata naming the format (magic "trainer-checkpoint", version), the position (epoch, step, batch in the
// epoch), the resolved config, trainer version and git sha, and a CRC-32 of all tensor bytes. Written
// atomically (temporary file, fsync, rename, fsync of the folder); a truncated or corrupted file fails its
// checksum and is skipped by --resume auto with a message.
#pragma once
#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

constexpr const char* kCheckpointMagic = "trainer-checkpoint";
constexpr int kCheckpointVersion = 1;

struct CheckpointState {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // "model.<name>", "optim.<...>", "rng.cpu", ...
  int64_t epoch = 0;          // epoch in progress
  int64_t batch = 0;          // batches of that epoch already trained on
  int64_t step = 0;           // optimizer steps taken
  std::string config_yaml;    // the resolved config of the run that wrote it
  std::map<std::string, std::string> extra;  // free-form (e.g. best metric)
};

// Writes `state` to path atomically. Throws Error (the previous file at path, if any, is untouched).
void write_checkpoint(const std::string& path, const CheckpointState& state);
// Reads and verifies (magic, version, checksum). Throws Error naming the file and the problem.
CheckpointState read_checkpoint(const std::string& path);

// The folder of a run's checkpoints: <dir>/ckpt-<step>.safetensors.
class CheckpointDir {
 public:
  explicit CheckpointDir(std::string dir) : dir_(std::move(dir)) {}
  std::string path_for(int64_t step) const;
  // All checkpoint files, oldest step first.
  std::vector<std::string> list() const;
  // Newest checkpoint that verifies; corrupt ones are reported (log::warn) and skipped. "" when none.
  std::string latest_valid() const;
  // Deletes all but the newest `keep` checkpoints.
  void prune(int64_t keep) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// The best K checkpoints by an eval metric, in their own folder (`<checkpoints>/best/`), apart from the last-N
// rotation: files are named best-<metric>-<value>-step-<step>.safetensors so the ranking needs no reading.
class BestCheckpoints {
 public:
  BestCheckpoints(std::string dir, std::string metric, int64_t keep);
  bool higher_is_better() const { return metric_ != "loss"; }
  // Whether `value` would enter the best K now.
  bool qualifies(double value) const;
  std::string path_for(double value, int64_t step) const;
  // Deletes all but the best K; returns the kept paths, best first.
  std::vector<std::string> prune() const;
  // Kept checkpoints with their metric, best first.
  std::vector<std::pair<double, std::string>> ranked() const;

 private:
  std::string dir_, metric_;
  int64_t keep_;
};

}  // namespace trainer
