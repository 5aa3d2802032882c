// TensorBoard event files without TensorFlow or protobuf: `events.out.tfevents.<time>.<host>` holding TFRecord
// frames (length, masked CRC-32C of the length, an Event protobuf, its masked CRC-32C) with scalar summaries.
// `tensorboard --logdir <run folder>` and tensorboard's EventAccumulator read them.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);  // TFRecord's: rotate right 15 bits, add 0xa282ead8

class EventWriter {
 public:
  // Creates the file in `dir` (which must exist) and writes the file_version record.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;
  const std::string& path() const { return path_; }
  // One event at `step` with one scalar summary value per (tag, value).
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // A SessionLog START event at `step`: TensorBoard drops the run's earlier events at this step and later, as
  // after a restart from a checkpoint (the resumed run writes them again).
  void session_start(int64_t step);
  void flush();

 private:
  void record(const std::string& event);
  std::string path_;
  FILE* f_ = nullptr;
};

// Reads back the frames of an event file, verifying both checksums of each (throws Error naming the offset);
// returns the serialized events. For tests and tools.
std::vector<std::string> read_tfrecords(const std::string& path);

}  // namespace trainer
