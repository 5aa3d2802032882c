// The one family of check macros: a failed check throws trainer::Error carrying file, line, the failed
// condition and a message for the user. I/O and user-input failures go through here, never assert().
#pragma once
#include <stdexcept>
#include <string>

#include "core/strings.h"

namespace trainer {

// Any failure the user can act on (bad file, bad value, missing device). what() is the full message.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad configuration or command line: reported without a stack of context and mapped to exit code 2.
class ConfigError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace trainer

// TRAINER_CHECK(n > 0, "batch_size must be positive, got ", n);
#define TRAINER_CHECK(cond, ...)                                                            \
  do {                                                                                      \
    if (!(cond)) ::trainer::detail::check_failed(__FILE__, __LINE__, #cond,                 \
                                                 ::trainer::str_cat(__VA_ARGS__));          \
  } while (0)

// Throws unconditionally (for the `default:` of a switch, an unknown name, ...).
#define TRAINER_FAIL(...) ::trainer::detail::check_failed(__FILE__, __LINE__, nullptr, ::trainer::str_cat(__VA_ARGS__))
