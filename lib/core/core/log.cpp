// The only TU that sees spdlog (see log.h for why).
#include "core/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <memory>
#include <functional>
#include <mutex>

#include "core/check.h"

namespace trainer::log {
namespace {

struct State {
  std::mutex mu;
  std::shared_ptr<spdlog::logger> console;
  std::shared_ptr<spdlog::logger> file;
  std::string prefix;
  std::function<void()> before, after;  // console guard (progress bar)
  std::atomic<int> level{static_cast<int>(Level::info)};
};

State& state() {
  static State s;
  return s;
}

std::shared_ptr<spdlog::logger>& console() {
  State& s = state();
  if (!s.console) {
    s.console = spdlog::stderr_color_mt("trainer_console");
    s.console->set_pattern("%^[%H:%M:%S %L]%$ %v");
    s.console->set_level(spdlog::level::trace);
  }
  return s.console;
}

spdlog::level::level_enum to_spd(Level l) {
  switch (l) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
    case Level::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

Level parse_level(const std::string& name) {
  if (name == "trace") return Level::trace;
  if (name == "debug") return Level::debug;
  if (name == "info") return Level::info;
  if (name == "warn" || name == "warning") return Level::warn;
  if (name == "error") return Level::error;
  if (name == "off") return Level::off;
  throw ConfigError("unknown log level '" + name + "' (expected trace, debug, info, warn, error, off)");
}

void set_level(Level l) { state().level = static_cast<int>(l); }
Level level() { return static_cast<Level>(state().level.load()); }
bool enabled(Level l) { return static_cast<int>(l) >= state().level.load() && l != Level::off; }

void set_rank(int rank, int world_size) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.prefix = world_size > 1 ? str_cat("[rank ", rank, "/", world_size, "] ") : std::string();
}

void set_file(const std::string& path) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.file) {
    s.file->flush();
    spdlog::drop(s.file->name());
    s.file.reset();
  }
  if (path.empty()) return;
  try {
    s.file = spdlog::basic_logger_mt("trainer_file", path);
  } catch (const spdlog::spdlog_ex& e) {
    throw Error(str_cat("cannot open log file ", path, ": ", e.what()));
  }
  s.file->set_pattern("[%Y-%m-%d %H:%M:%S.%e %L] %v");
  s.file->set_level(spdlog::level::trace);
  s.file->flush_on(spdlog::level::trace);  // every line reaches the file as it is written (a kill loses none)
}

void write(Level l, const std::string& msg) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string line = s.prefix + msg;
  if (s.before) s.before();
  console()->log(to_spd(l), line);
  if (s.after) {
    console()->flush();
    s.after();
  }
  if (s.file) s.file->log(to_spd(l), line);
}

void write_file(Level l, const std::string& msg) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.file) s.file->log(to_spd(l), s.prefix + msg);
}

void set_console_guard(std::function<void()> before, std::function<void()> after) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.before = std::move(before);
  s.after = std::move(after);
}

void flush() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  console()->flush();
  if (s.file) s.file->flush();
}

}  // namespace trainer::log
