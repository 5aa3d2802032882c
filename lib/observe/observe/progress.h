// A one-line progress bar for terminals: epoch, step, images/s, loss, ETA, redrawn in place at most ten times a
// second. It draws only when its stream is a terminal; otherwise it writes nothing and the plain log lines are
// the whole output. Log lines erase it first and it comes back after them (log::set_console_guard).
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace trainer {

struct ProgressState {
  int64_t epoch = 0, epochs = 0;  // 1-based epoch
  int64_t step = 0, steps = 0;    // optimizer steps into this epoch, of this many
  double img_per_s = 0;
  double loss = -1;               // < 0: not known yet
  double eta_s = -1;              // < 0: not known yet
};

// The bar's text for a terminal `width` columns wide (no control characters).
std::string render_progress(const ProgressState& s, int width);
// "1h02m", "3m05s", "42s"
std::string format_duration(double seconds);

class ProgressBar {
 public:
  // Active when `out` is a terminal (or `force`); registers itself with the log so lines do not mix.
  explicit ProgressBar(FILE* out = stderr, bool force = false);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  bool active() const { return active_; }
  void update(const ProgressState& s);  // redraws if 100 ms passed since the last draw
  void clear();                         // erase the line
  void redraw();                        // draw the last state again
  void done();                          // erase and stop drawing

 private:
  FILE* out_;
  bool active_;
  bool shown_ = false;
  ProgressState last_;
  std::chrono::steady_clock::time_point t_draw_{};
};

}  // namespace trainer
