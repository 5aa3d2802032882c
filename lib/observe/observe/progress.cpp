#include "observe/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "core/log.h"
#include "core/strings.h"

namespace trainer {

std::string format_duration(double s) {
  if (s < 0 || !std::isfinite(s)) return "?";
  const long long t = std::llround(s);
  if (t >= 3600) return strprintf("%lldh%02lldm", t / 3600, (t % 3600) / 60);
  if (t >= 60) return strprintf("%lldm%02llds", t / 60, t % 60);
  return strprintf("%llds", t);
}

std::string render_progress(const ProgressState& s, int width) {
  std::string left = strprintf("epoch %lld/%lld ", static_cast<long long>(s.epoch), static_cast<long long>(s.epochs));
  std::string right = strprintf(" %lld/%lld | %.0f img/s", static_cast<long long>(s.step),
                                static_cast<long long>(s.steps), s.img_per_s);
  if (s.loss >= 0) right += strprintf(" | loss %.4f", s.loss);
  right += " | ETA " + format_duration(s.eta_s);
  const int bar = std::min(40, width - static_cast<int>(left.size() + right.size()) - 2);
  if (bar < 5) return (left + right).substr(0, static_cast<size_t>(std::max(width - 1, 0)));
  const double frac = s.steps > 0 ? std::clamp(static_cast<double>(s.step) / s.steps, 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(std::lround(frac * bar));
  return left + "[" + std::string(filled, '#') + std::string(bar - filled, '.') + "]" + right;
}

namespace {
ProgressBar* g_bar = nullptr;  // the one shown; the log erases it around its lines
int terminal_width(FILE* f) {
  winsize w{};
  if (::ioctl(fileno(f), TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  return 100;
}
}  // namespace

ProgressBar::ProgressBar(FILE* out, bool force) : out_(out), active_(force || ::isatty(fileno(out))) {
  if (!active_) return;
  g_bar = this;
  log::set_console_guard([] { if (g_bar) g_bar->clear(); }, [] { if (g_bar) g_bar->redraw(); });
}

ProgressBar::~ProgressBar() { done(); }

void ProgressBar::update(const ProgressState& s) {
  if (!active_) return;
  last_ = s;
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && now - t_draw_ < std::chrono::milliseconds(100)) return;
  t_draw_ = now;
  redraw();
}

void ProgressBar::clear() {
  if (!active_ || !shown_) return;
  std::fputs("\r\033[2K", out_);
  std::fflush(out_);
  shown_ = false;
}

void ProgressBar::redraw() {
  if (!active_ || last_.epochs == 0) return;
  std::fputs(("\r\033[2K" + render_progress(last_, terminal_width(out_))).c_str(), out_);
  std::fflush(out_);
  shown_ = true;
}

void ProgressBar::done() {
  if (!active_) return;
  clear();
  if (g_bar == this) {
    g_bar = nullptr;
    log::set_console_guard(nullptr, nullptr);
  }
  active_ = false;
}

}  // namespace trainer
