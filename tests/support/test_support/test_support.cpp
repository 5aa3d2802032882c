#include "test_support/test_support.h"

#include "core/fs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace trainer::test {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/trainer_test_XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  fs::remove_tree(path_);
}

pid_t spawn(const std::string& cmd, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd + " > " + shell_quote(log) + " 2>&1").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << content;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool path_exists(const std::string& path) { return fs::exists(path); }

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string python_fixtures(const std::string& name, const std::string& script, const std::string& args) {
  const std::string dir = fixtures_root() + "/" + name;
  fs::make_dirs(dir);
  const int lock = ::open((dir + "/.lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) throw std::runtime_error("cannot lock " + dir);
  // the stamp records the script's text and arguments: changing either regenerates the fixtures
  const std::string stamp = dir + "/.done";
  const std::string key = read_file(source_dir() + "/" + script) + "\n" + args;
  if (!fs::exists(stamp) || read_file(stamp) != key) {
    const auto r = run_command(shell_quote(python()) + " " + shell_quote(source_dir() + "/" + script) + " " +
                               shell_quote(dir) + " " + args);
    if (r.exit_code != 0) {
      ::close(lock);
      throw std::runtime_error("fixture script " + script + " failed (is the venv set up? scripts/setup.sh):\n" +
                               r.output);
    }
    write_file(stamp, key);
  }
  ::close(lock);
  return dir;
}

std::string& FixtureSuite::fixture_error_() {
  static std::string e;
  return e;
}
std::string& FixtureSuite::fixture_dir_() {
  static std::string d;
  return d;
}
void FixtureSuite::load_fixtures(const std::string& name, const std::string& script, const std::string& args) {
  try {
    fixture_dir_() = python_fixtures(name, script, args);
    fixture_error_().clear();
  } catch (const std::exception& e) {
    fixture_error_() = e.what();
  }
}

}  // namespace trainer::test
