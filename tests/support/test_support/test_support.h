// Helpers shared by the test executables: temporary folders, running commands, files.
#pragma once
#include <gtest/gtest.h>

#include <sys/types.h>

#include <string>

namespace trainer::test {

// A fresh folder under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;   // the command's exit status (-1 if it did not exit normally)
  std::string output;   // stdout and stderr together
};

// Runs `cmd` through /bin/sh, capturing stdout+stderr.
CommandResult run_command(const std::string& cmd);
// Starts `cmd` in the background (/bin/sh execs it, so the pid is the command's own), stdout+stderr to `log`;
// the caller waits for the pid.
pid_t spawn(const std::string& cmd, const std::string& log);
void write_file(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);
bool path_exists(const std::string& path);
// Quotes a string for /bin/sh.
std::string shell_quote(const std::string& s);

// Fixtures made by a Python script (run with the project venv) into <build>/test_fixtures/<name>, once per
// build: `script OUTDIR args` runs under a file lock, so parallel tests share one run. Returns the folder;
// throws std::runtime_error with the script's output when it fails.
std::string python_fixtures(const std::string& name, const std::string& script, const std::string& args);

// Base for suites that share Python-made fixtures: a failing script fails every test of the suite (a failure
// inside SetUpTestSuite alone would be reported as a skip).
class FixtureSuite : public ::testing::Test {
 protected:
  static void load_fixtures(const std::string& name, const std::string& script, const std::string& args);
  void SetUp() override { ASSERT_TRUE(fixture_error_().empty()) << fixture_error_(); }
  static std::string fixture_path(const std::string& file) { return fixture_dir_() + "/" + file; }

 private:
  static std::string& fixture_error_();
  static std::string& fixture_dir_();
};

// Paths compiled in by CMake.
inline std::string python() { return TRAINER_TEST_PYTHON; }
inline std::string source_dir() { return TRAINER_SOURCE_DIR; }
inline std::string trainer_binary() { return TRAINER_BINARY; }
inline std::string fixtures_root() { return TRAINER_TEST_FIXTURES; }

}  // namespace trainer::test
