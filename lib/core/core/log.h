// Logging facade. spdlog is confined to log.cpp: LibTorch ships fmt headers that clash with the fmt spdlog
// was built against, so no TU that includes torch may include spdlog. Messages are built with str_cat.
//
//   log::info("epoch ", e, " top1 ", acc);
//
// Every line carries a rank prefix once set_rank() is called with world > 1; only rank 0 writes the file.
#pragma once
#include <functional>
#include <string>

#include "core/strings.h"

namespace trainer::log {

enum class Level { trace = 0, debug, info, warn, error, off };

Level parse_level(const std::string& name);  // throws ConfigError on an unknown name
void set_level(Level level);
Level level();
bool enabled(Level level);
// Distributed runs: prefix lines with "[rank r/w]"; ranks > 0 log warnings and errors only by default.
void set_rank(int rank, int world_size);
// Also write to this file (created/appended). Empty path closes it.
void set_file(const std::string& path);
void write(Level level, const std::string& msg);
// To the file only (a fatal error that main() prints on the console itself).
void write_file(Level level, const std::string& msg);
// Called around every console line (e.g. a progress bar erases itself before and redraws after); empty = none.
void set_console_guard(std::function<void()> before, std::function<void()> after);
void flush();

template <class... A> void trace(const A&... a) { if (enabled(Level::trace)) write(Level::trace, str_cat(a...)); }
template <class... A> void debug(const A&... a) { if (enabled(Level::debug)) write(Level::debug, str_cat(a...)); }
template <class... A> void info(const A&... a) { if (enabled(Level::info)) write(Level::info, str_cat(a...)); }
template <class... A> void warn(const A&... a) { if (enabled(Level::warn)) write(Level::warn, str_cat(a...)); }
template <class... A> void error(const A&... a) { if (enabled(Level::error)) write(Level::error, str_cat(a...)); }

}  // namespace trainer::log
