#include "core/check.h"

#include <cstring>

namespace trainer::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  std::string full = msg;
  if (cond) full += str_cat(" [check '", cond, "' failed]");
  full += str_cat(" (", base, ":", line, ")");
  throw Error(full);
}

}  // namespace trainer::detail
