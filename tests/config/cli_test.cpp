// Command-line parsing, and the real binary's exit codes: 2 for any bad config or option, nothing written.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/cli.h"
#include "core/check.h"
#include "core/fs.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

const std::vector<CommandSpec> kCmds = {{"train", "t"}, {"bench", "b"}};

CommandLine parse(std::vector<const char*> args) {
  args.insert(args.begin(), "trainer");
  return parse_command_line(static_cast<int>(args.size()), args.data(), kCmds);
}

TEST(Cli, DefaultsToTrain) {
  const CommandLine cl = parse({"--config", "x.yaml", "--set", "a.b=1", "--set=c.d=2"});
  EXPECT_EQ(cl.command, "train");
  EXPECT_EQ(cl.config_path, "x.yaml");
  EXPECT_EQ(cl.overrides, (std::vector<std::string>{"a.b=1", "c.d=2"}));
}

TEST(Cli, CommandAndFlags) {
  const CommandLine cl = parse({"bench", "--config=y.yaml", "--print-config", "--docs"});
  EXPECT_EQ(cl.command, "bench");
  EXPECT_EQ(cl.config_path, "y.yaml");
  EXPECT_TRUE(cl.print_config);
  EXPECT_TRUE(cl.docs);
}

TEST(Cli, Errors) {
  EXPECT_THROW(parse({"fly"}), ConfigError);
  EXPECT_THROW(parse({"--config"}), ConfigError);
  EXPECT_THROW(parse({"--bogus"}), ConfigError);
}

// ---- the binary ----

std::string trainer_cmd(const std::string& args) { return test::shell_quote(test::trainer_binary()) + " " + args; }

TEST(Binary, BadConfigsExitTwoAndWriteNothing) {
  test::TempDir dir;
  const std::string out = dir.file("runs");
  const std::string sets = " --set run.out_dir=" + out;
  struct Case {
    std::string yaml;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"model:\n  bogus: 1\n", "unknown key 'model.bogus'"},
      {"data:\n  batch_size: big\n", "expected an integer"},
      {"optim:\n  lr: 0\n", "'optim.lr'"},
      {"train:\n  precision: fp4\n", "one of: bf16, fp16, fp32"},
      {"a: [\n", "invalid YAML"},
      {"", "holds no settings"},
      {"run:\n  seed: 1\n  seed: 2\n", "key 'run.seed' is given twice"},
  };
  for (const auto& c : cases) {
    test::write_file(dir.file("bad.yaml"), c.yaml);
    const auto r = test::run_command(trainer_cmd("--config " + dir.file("bad.yaml") + sets));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("bad.yaml"), std::string::npos) << r.output;
    EXPECT_FALSE(test::path_exists(out)) << "a bad config wrote " << out;
  }
  auto r = test::run_command(trainer_cmd("--config " + dir.file("missing.yaml") + sets));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("missing.yaml"), std::string::npos) << r.output;
  r = test::run_command(trainer_cmd("--set optim.lr=-1" + sets));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = test::run_command(trainer_cmd("--no-such-option"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = test::run_command(trainer_cmd("no-such-command"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(test::path_exists(out));
}

// A folder (or nothing) where a file is expected: exit 2 naming the argument and the path, nothing written (a
// folder given as weights used to end in std::bad_alloc).
TEST(Binary, FolderOrMissingFileArgumentsExitTwoNamingThem) {
  test::TempDir dir;
  const std::string out = dir.file("runs"), folder = dir.file("a_folder");
  fs::make_dirs(folder);
  test::write_file(dir.file("a_folder/x"), "");
  const std::string sets = " --set run.out_dir=" + out;
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {"eval --weights " + folder, "--weights " + folder + ": is a folder"},
      {"--set model.pretrained=" + folder, "key 'model.pretrained': " + folder + ": is a folder"},
      {"--resume " + folder, "--resume (checkpoint.resume) " + folder + ": is a folder"},
      {"--resume " + dir.file("none.safetensors"), "none.safetensors: no such file"},
      {"export --checkpoint " + folder + " --out " + dir.file("m.safetensors"), "--checkpoint " + folder + ": is a folder"},
      {"--config " + folder, folder + ": is a folder"},
  };
  for (const auto& c : cases) {
    const auto r = test::run_command(trainer_cmd(c.args + sets));
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << r.output;
    EXPECT_FALSE(test::path_exists(out)) << c.args << " wrote " << out;
  }
  EXPECT_FALSE(test::path_exists(dir.file("m.safetensors")));
}

TEST(Binary, BadLauncherEnvironmentIsAConfigError) {
  const auto r = test::run_command("RANK=2 WORLD_SIZE=2 " + trainer_cmd("--print-config"));
  EXPECT_EQ(r.exit_code, 0) << "printing the config needs no rendezvous";
  const auto bad = test::run_command("RANK=2 WORLD_SIZE=2 " + trainer_cmd("--set train.epochs=1"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("rank 2 is not in [0, world size 2)"), std::string::npos) << bad.output;
}

TEST(Binary, PrintConfigAppliesOverrides) {
  const auto r = test::run_command(trainer_cmd("--set optim.lr=0.25 --print-config"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("lr: 0.25"), std::string::npos) << r.output;
}

// Every shipped config prints on a machine without its data (documentation use), and what it prints reads back
// as the same config: printing it again gives the same text.
TEST(Binary, EveryShippedConfigPrintsWithoutItsData) {
  const std::string configs = test::source_dir() + "/configs";
  int n = 0;
  for (const std::string& name : fs::list_dir(configs)) {
    if (name.size() < 5 || name.substr(name.size() - 5) != ".yaml") continue;
    ++n;
    const auto r = test::run_command(trainer_cmd("--config " + configs + "/" + name + " --print-config"));
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find("model:"), std::string::npos) << name << "\n" << r.output;
    test::TempDir dir;
    test::write_file(dir.file("printed.yaml"), r.output);
    const auto again = test::run_command(trainer_cmd("--config " + dir.file("printed.yaml") + " --print-config"));
    ASSERT_EQ(again.exit_code, 0) << name << "\n" << again.output;
    EXPECT_EQ(again.output, r.output) << name << ": the printed config does not read back as itself";
  }
  EXPECT_GE(n, 4) << "configs/ holds the shipped recipes";
}

// configs/resnet50.yaml without ImageNet where it looks: exit 2, naming the folder and the layout expected, and
// pointing at `trainer pack`; nothing written.
TEST(Binary, AMissingImageFolderSaysHowToLayItOut) {
  test::TempDir dir;
  const auto r = test::run_command(trainer_cmd("--config " + test::source_dir() + "/configs/resnet50.yaml --set data.root=" +
                                               dir.file("imagenet") + " --set run.out_dir=" + dir.file("runs")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const std::string& part : std::vector<std::string>{dir.file("imagenet") + "/train is not a folder", "ImageFolder layout",
                                 "/train/<class>/<image>.jpg", "trainer pack"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " missing in\n" << r.output;
  EXPECT_FALSE(test::path_exists(dir.file("runs")));
}

TEST(Binary, VersionNamesLibraries) {
  const auto r = test::run_command(trainer_cmd("--version"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"trainer", "LibTorch 2.11", "CUDA", "cuDNN", "NCCL", "GPU"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " missing in\n" << r.output;
}

TEST(Binary, HelpListsOnlyRealCommands) {
  const auto r = test::run_command(trainer_cmd("--help"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("train"), std::string::npos);
}

}  // namespace
}  // namespace trainer
