#include "config/cli.h"

#include "core/check.h"
#include "core/strings.h"

namespace trainer {

std::string usage_text(const std::vector<CommandSpec>& commands) {
  std::string s =
      "usage: trainer [command] [--config FILE] [--set key.path=value]... [options]\n\n"
      "commands:\n";
  for (const auto& c : commands) s += strprintf("  %-10s %s\n", c.name.c_str(), c.summary.c_str());
  s +=
      "\noptions:\n"
      "  --config FILE      YAML config (default: the built-in Fashion-MNIST recipe)\n"
      "  --set KEY=VALUE    override one key, e.g. --set optim.lr=0.05 (repeatable)\n"
      "  --print-config     print the resolved config and exit (add --docs for a comment per key)\n"
      "  --weights FILE     eval: safetensors weights to evaluate\n"
      "  --out FILE         bench: also write the result JSON here; export: the safetensors file\n"
      "  --resume auto|PATH continue from the newest valid checkpoint of the run, or from PATH\n"
      "  --profile S:E      Chrome trace of optimizer steps S..E-1 (run folder/trace.json)\n"
      "  --checkpoint FILE  export: the checkpoint to read\n"
      "  --version          print versions of trainer, LibTorch, CUDA, cuDNN, NCCL and the GPUs found\n"
      "  -h, --help         this text\n";
  return s;
}

CommandLine parse_command_line(int argc, const char* const* argv, const std::vector<CommandSpec>& commands) {
  CommandLine cl;
  int i = 1;
  if (i < argc && argv[i][0] != '-') {
    const std::string word = argv[i];
    bool known = false;
    std::vector<std::string> names;
    for (const auto& c : commands) {
      known = known || c.name == word;
      names.push_back(c.name);
    }
    if (!known) throw ConfigError(str_cat("unknown command '", word, "' (commands: ", join(names, ", "), ")"));
    cl.command = word;
    ++i;
  }
  auto value_of = [&](const std::string& opt) -> std::string {
    if (i + 1 >= argc) throw ConfigError(str_cat("option ", opt, " needs a value"));
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string a = argv[i];
    std::string inline_value;
    bool has_inline = false;
    if (starts_with(a, "--") && a.find('=') != std::string::npos && !starts_with(a, "--set=")) {
      inline_value = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      has_inline = true;
    }
    auto take = [&](const std::string& opt) { return has_inline ? inline_value : value_of(opt); };
    if (a == "--config") {
      cl.config_path = take(a);
    } else if (a == "--set") {
      cl.overrides.push_back(value_of(a));
    } else if (starts_with(a, "--set=")) {
      cl.overrides.push_back(a.substr(6));
    } else if (a == "--weights") {
      cl.weights = take(a);
    } else if (a == "--out") {
      cl.out = take(a);
    } else if (a == "--checkpoint") {
      cl.checkpoint = take(a);
    } else if (a == "--resume") {
      cl.overrides.push_back("checkpoint.resume=" + take(a));
    } else if (a == "--profile") {
      cl.overrides.push_back("run.profile=" + take(a));
    } else if (a == "--print-config") {
      cl.print_config = true;
    } else if (a == "--docs") {
      cl.docs = true;
    } else if (a == "--version") {
      cl.version = true;
    } else if (a == "-h" || a == "--help") {
      cl.help = true;
    } else {
      throw ConfigError(str_cat("unknown option '", argv[i], "' (see trainer --help)"));
    }
  }
  return cl;
}

}  // namespace trainer
