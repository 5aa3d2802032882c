// Helpers shared by the test executables: temporary folders, running commands, files.
#pragma once
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
void write_file(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);
bool path_exists(const std::string& path);
// Quotes a string for /bin/sh.
std::string shell_quote(const std::string& s);

// Fixtures made by a Python script (run with the project venv) into <build>/test_fixtures/<name>, once per
// build: `script OUTDIR args` runs under a file lock, so parallel tests share one run. Fails the test (not
// skips) when the script fails: the fixtures are part of the suite. Returns the folder.
std::string python_fixtures(const std::string& name, const std::string& script, const std::string& args);

// Paths compiled in by CMake.
inline std::string python() { return TRAINER_TEST_PYTHON; }
inline std::string source_dir() { return TRAINER_SOURCE_DIR; }
inline std::string trainer_binary() { return TRAINER_BINARY; }
inline std::string fixtures_root() { return TRAINER_TEST_FIXTURES; }

}  // namespace trainer::test
