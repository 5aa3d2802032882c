// The trainer command line: `trainer [command] [--config FILE] [--set key=value]... [options]`.
// Parsing only; apps/trainer decides what each command does.
#pragma once
#include <string>
#include <vector>

namespace trainer {

struct CommandSpec {
  std::string name;     // "train"
  std::string summary;  // one line for --help
};

struct CommandLine {
  std::string command = "train";       // first positional word, default train
  std::string config_path;             // --config FILE (empty = built-in defaults)
  std::vector<std::string> overrides;  // --set key=value, in order
  std::string weights;                 // --weights FILE (eval)
  std::string out;                     // --out FILE (bench JSON, export)
  std::string checkpoint;              // --checkpoint FILE (export)
  bool print_config = false;           // --print-config
  bool docs = false;                   // --docs (with --print-config)
  bool version = false;                // --version
  bool help = false;                   // --help / -h
};

// Throws ConfigError on an unknown command or option, or a missing option value.
CommandLine parse_command_line(int argc, const char* const* argv, const std::vector<CommandSpec>& commands);
std::string usage_text(const std::vector<CommandSpec>& commands);

}  // namespace trainer
