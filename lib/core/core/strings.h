// String helpers shared by every module: concatenation of anything streamable, joining, splitting.
// Used instead of fmt so that no TU has to choose between torch's bundled fmt and the system one.
#pragma once
#include <sstream>
#include <string>
#include <vector>

namespace trainer {

// str_cat("lr=", 0.1, " step ", 3) -> "lr=0.1 step 3"
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

std::string join(const std::vector<std::string>& parts, const std::string& sep);
std::vector<std::string> split(const std::string& s, char sep);
std::string trim(const std::string& s);
bool starts_with(const std::string& s, const std::string& prefix);
bool ends_with(const std::string& s, const std::string& suffix);
std::string to_lower(std::string s);
// printf-style formatting into a std::string (for fixed-width numbers in tables and logs).
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace trainer
