// trainer: the command-line entry point. Wires modules together and maps errors to exit codes:
// 0 success, 1 runtime failure, 2 bad config or command line (nothing written).
#include <cstdio>
#include <exception>
#include <iostream>

#include "config/cli.h"
#include "config/config.h"
#include "core/check.h"
#include "core/log.h"
#include "runtime/env.h"

namespace {

const std::vector<trainer::CommandSpec> kCommands = {
    {"train", "train a model from a config (the default command)"},
};

int run(int argc, char** argv) {
  using namespace trainer;
  const CommandLine cl = parse_command_line(argc, argv, kCommands);
  if (cl.help) {
    std::cout << usage_text(kCommands);
    return 0;
  }
  if (cl.version) {
    std::cout << format_env(query_env());
    return 0;
  }
  const Config cfg = cl.config_path.empty() ? config_from_overrides(cl.overrides)
                                            : load_config(cl.config_path, cl.overrides);
  if (cl.print_config) {
    std::cout << config_to_yaml(cfg, cl.docs);
    return 0;
  }
  log::set_level(log::parse_level(cfg.run.log_level));
  TRAINER_FAIL("the train command needs the engine module, which is not built yet");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const trainer::ConfigError& e) {
    std::fprintf(stderr, "trainer: config error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: error: %s\n", e.what());
    return 1;
  }
}
