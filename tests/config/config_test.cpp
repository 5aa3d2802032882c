// Every way a config can be wrong gets one clear error naming file, line, key and what is allowed.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "config/config.h"
#include "core/check.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

// Loads YAML text from a temp file; returns the ConfigError message ("" if it loaded).
std::string load_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  test::TempDir dir;
  const std::string path = dir.file("c.yaml");
  test::write_file(path, yaml);
  try {
    load_config(path, sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

void expect_has(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nmissing: " << part;
}

TEST(Config, LoadsValuesOverDefaults) {
  test::TempDir dir;
  test::write_file(dir.file("c.yaml"),
                   "model:\n  name: resnet50\n  num_classes: 1000\noptim:\n  lr: 0.5\n  betas: [0.8, 0.99]\n"
                   "data:\n  mean: [0.5]\n  std: [0.25]\n");
  const Config c = load_config(dir.file("c.yaml"));
  EXPECT_EQ(c.model.name, "resnet50");
  EXPECT_EQ(c.model.num_classes, 1000);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.5);
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.8, 0.99}));
  EXPECT_EQ(c.data.mean, std::vector<double>{0.5});
  EXPECT_EQ(c.data.batch_size, Config().data.batch_size);  // untouched keys keep their default
}

// A config that holds nothing would train the built-in defaults without a word: refused, as is a folder given as
// the file, and a key given twice (yaml-cpp keeps both; which one won was an accident).
TEST(Config, EmptyFileFolderAndDuplicateKeysAreErrors) {
  for (const char* empty : {"", "# only a comment\n", "~\n"}) expect_has(load_error(empty), "holds no settings");
  test::TempDir dir;
  try {
    load_config(dir.path());
    FAIL() << "a folder loaded as a config";
  } catch (const ConfigError& e) {
    expect_has(e.what(), dir.path() + ": is a folder");
  }
  const std::string twice = load_error("run:\n  seed: 1\n  seed: 2\n");
  expect_has(twice, "c.yaml:3: key 'run.seed' is given twice (first at ");
  expect_has(twice, "c.yaml:2)");
  expect_has(load_error("run:\n  seed: 1\nmodel:\n  name: resnet50\nrun:\n  name: x\n"),
             "c.yaml:5: key 'run' is given twice (first at ");
}

TEST(Config, UnknownKeyNamesLineAndAllowedKeys) {
  const std::string m = load_error("model:\n  name: resnet18\n  nmu_classes: 3\n");
  expect_has(m, "c.yaml:3");
  expect_has(m, "unknown key 'model.nmu_classes'");
  expect_has(m, "num_classes");
}

TEST(Config, UnknownSection) {
  const std::string m = load_error("modle:\n  name: x\n");
  expect_has(m, "c.yaml:1");
  expect_has(m, "unknown key 'modle'");
  expect_has(m, "model");
}

TEST(Config, WrongTypeInt) {
  const std::string m = load_error("data:\n  batch_size: many\n");
  expect_has(m, "c.yaml:2");
  expect_has(m, "'data.batch_size'");
  expect_has(m, "expected an integer");
  expect_has(m, "got 'many'");
}

TEST(Config, WrongTypeBoolAndFloat) {
  expect_has(load_error("run:\n  deterministic: maybe\n"), "expected true or false");
  expect_has(load_error("optim:\n  lr: fast\n"), "expected a number");
  expect_has(load_error("optim:\n  lr: [1, 2]\n"), "got 'a list'");
  expect_has(load_error("model:\n  name:\n    a: 1\n"), "got 'a mapping'");
}

TEST(Config, OutOfRange) {
  const std::string m = load_error("optim:\n  lr: -0.1\n");
  expect_has(m, "c.yaml:2");
  expect_has(m, "'optim.lr'");
  expect_has(m, "> 0");
  expect_has(load_error("data:\n  batch_size: 0\n"), "in [1,");
  expect_has(load_error("model:\n  drop_path_rate: 1.0\n"), "in [0, 1)");
}

TEST(Config, BadChoiceListsAllowed) {
  const std::string m = load_error("train:\n  precision: fp8\n");
  expect_has(m, "'train.precision'");
  expect_has(m, "one of: bf16, fp16, fp32");
  expect_has(load_error("data:\n  auto_augment: randaugment\n"), "one of: none, rand, trivial");
  expect_has(load_error("data:\n  auto_augment_magnitude: 31\n"), "'data.auto_augment_magnitude'");
}

TEST(Config, ListLengthAndItems) {
  expect_has(load_error("optim:\n  betas: [0.9]\n"), "of length 2");
  expect_has(load_error("optim:\n  betas: [0.9, x]\n"), "'optim.betas'");
}

TEST(Config, SectionMustBeMapping) {
  const std::string m = load_error("model: resnet50\n");
  expect_has(m, "key 'model' must be a mapping");
}

TEST(Config, InvalidYamlNamesLine) {
  const std::string m = load_error("model:\n  name: [unclosed\n");
  expect_has(m, "c.yaml:");
  expect_has(m, "invalid YAML");
}

TEST(Config, MissingFile) {
  try {
    load_config("/nonexistent/dir/x.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    expect_has(e.what(), "/nonexistent/dir/x.yaml");
    expect_has(e.what(), "cannot open");
  }
}

TEST(Config, CrossFieldChecks) {
  expect_has(load_error("model:\n  in_chans: 3\ndata:\n  mean: [0.5]\n"), "'data.mean': expected 3 values");
  expect_has(load_error("data:\n  rrc_scale: [0.9, 0.1]\n"), "'data.rrc_scale'");
  expect_has(load_error("model:\n  in_chans: 1\ndata:\n  source: image_folder\n  root: x\n"),
             "'model.in_chans': image files decode to RGB");
  expect_has(load_error("model:\n  in_chans: 3\ndata:\n  source: shards\n  root: x\n  train_crop: pad_crop\n"),
             "'data.train_crop': image sources support rrc");
  expect_has(load_error("model:\n  in_chans: 1\ndata:\n  mean: [0.5]\n  std: [0.5]\n  jitter: [0.4, 0.4, 0.4, 0.1]\n"),
             "'data.jitter': colour jitter needs RGB images");
}

// Progressive resizing follows FFCV's get_resolution (rn50 configs: min_res 160, max_res 192; 16 epochs ramp over
// 11-13, 88 epochs over 65-76): the ends as given, numpy's interp rounded half to even to a multiple of 32 between.
TEST(Config, ProgressiveResizingFollowsFfcvsRamp) {
  DataConfig d;
  d.image_size = 224;
  EXPECT_EQ(train_image_size(d, 5), 224);  // off
  d.train_size_min = 160;
  d.train_size_max = 192;
  d.train_size_ramp = {11, 13};
  const std::vector<int64_t> sixteen = {160, 160, 160, 160, 160, 160, 160, 160, 160, 160, 160, 160, 192, 192, 192, 192};
  for (int64_t e = 0; e < 16; ++e) EXPECT_EQ(train_image_size(d, e), sixteen[static_cast<size_t>(e)]) << "epoch " << e;
  d.train_size_ramp = {65, 76};  // 70: 174.5 -> 5.45 -> 160; 71: 177.5 -> 5.55 -> 192
  EXPECT_EQ(train_image_size(d, 65), 160);
  EXPECT_EQ(train_image_size(d, 70), 160);
  EXPECT_EQ(train_image_size(d, 71), 192);
  EXPECT_EQ(train_image_size(d, 87), 192);
  d.train_size_min = 100;  // not a multiple of 32: as given before the ramp, as FFCV
  d.train_size_max = 0;    // data.image_size
  d.train_size_ramp = {0, 10};
  EXPECT_EQ(train_image_size(d, 0), 100);
  EXPECT_EQ(train_image_size(d, 5), 160);  // 162 -> 5.06 -> 160
  EXPECT_EQ(train_image_size(d, 10), 224);

  expect_has(load_error("data:\n  image_size: 128\n  train_size_min: 160\n"),
             "'data.train_size_min': expected at most train_size_max (or data.image_size) 128, got 160");
  expect_has(load_error("data:\n  image_size: 224\n  train_size_min: 160\n  train_size_ramp: [9, 3]\n"),
             "'data.train_size_ramp': expected [first, last] epochs");
  expect_has(load_error("data:\n  image_size: 224\n  train_size_min: 160\ntrain:\n  cuda_graph: true\n"),
             "'data.train_size_min': progressive resizing changes the batch shape");
  expect_has(load_error("model:\n  name: vit_tiny_patch16_224\ndata:\n  image_size: 224\n  train_size_min: 160\n"),
             "position embeddings fit one grid");
}

// The checks that need the run's device and ranks, in one place: each names its key.
TEST(Config, RunChecksNameTheKeyThatCannotRunHere) {
  auto error_for = [](const std::vector<std::string>& sets, bool cuda, int world) {
    try {
      validate_config_for_run(config_from_overrides(sets), cuda, world);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  expect_has(error_for({"data.dtype=bfloat16"}, false, 1), "'data.dtype': bfloat16 needs a CUDA device");
  expect_has(error_for({"train.cuda_graph=true"}, false, 1), "'train.cuda_graph': needs a CUDA device");
  expect_has(error_for({"train.cuda_graph=true"}, true, 2), "'train.cuda_graph': captures one GPU's step; not with 2");
  expect_has(error_for({"data.decode=gpu"}, false, 1), "'data.decode': gpu needs run.device cuda");
  EXPECT_EQ(error_for({"data.dtype=bfloat16", "train.cuda_graph=true", "data.decode=gpu"}, true, 1), "");
  expect_has(error_for({"data.decode=hybrid"}, false, 1), "'data.decode': hybrid needs run.device cuda");
  expect_has(error_for({"data.decode=hybrid", "data.hybrid_share=-0.5"}, true, 1),
             "'data.hybrid_share': expected -1 (adapted) or a share in [0, 1], got -0.5");
  EXPECT_EQ(error_for({"data.decode=hybrid", "data.hybrid_share=0.4"}, true, 1), "");
  expect_has(error_for({"data.decode=gpu", "data.gpu_decode_sms=-8"}, true, 1), "'data.gpu_decode_sms'");
  EXPECT_EQ(error_for({"data.decode=gpu", "data.gpu_decode_sms=16"}, true, 1), "");
  expect_has(error_for({"data.decode=cpu", "data.gpu_decode_sms=16"}, true, 1),
             "'data.gpu_decode_sms': sets the GPU decode path; data.decode is cpu");
  EXPECT_EQ(error_for({"data.decode=gpu", "data.gpu_decode_priority=high"}, true, 1), "");
  expect_has(error_for({"data.decode=gpu", "data.gpu_decode_priority=highest"}, true, 1),
             "'data.gpu_decode_priority'");
  expect_has(error_for({"data.decode=cpu", "data.gpu_decode_priority=high"}, true, 1),
             "'data.gpu_decode_priority': sets the GPU decode path; data.decode is cpu");
  EXPECT_EQ(error_for({"data.decode=gpu", "data.gpu_decode_calls=2"}, true, 1), "");
  expect_has(error_for({"data.decode=gpu", "data.gpu_decode_calls=0"}, true, 1), "'data.gpu_decode_calls'");
  expect_has(error_for({"data.decode=cpu", "data.gpu_decode_calls=2"}, true, 1),
             "'data.gpu_decode_calls': sets the GPU decode path; data.decode is cpu");
  EXPECT_EQ(error_for({"data.decode=gpu", "data.gpu_decode_mosaic=16"}, true, 1), "");
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  expect_has(error_for({"data.training_cores=" + std::to_string(cores)}, true, 1),
             "'data.training_cores': " + std::to_string(cores) + " leaves no CPU for the data threads");
  if (cores > 1) EXPECT_EQ(error_for({"data.training_cores=1"}, true, 1), "");
  expect_has(error_for({"data.decode=gpu", "data.gpu_decode_mosaic=1"}, true, 1),
             "'data.gpu_decode_mosaic': a mosaic of one window is the file on its own");
  expect_has(error_for({"data.decode=gpu", "data.gpu_decode_mosaic=65"}, true, 1), "'data.gpu_decode_mosaic'");
  expect_has(error_for({"data.decode=cpu", "data.gpu_decode_mosaic=16"}, true, 1),
             "'data.gpu_decode_mosaic': sets the GPU decode path; data.decode is cpu");
  expect_has(error_for({"data.decode=gpu", "data.gpu_decode_priority=high", "data.gpu_decode_sms=16"}, true, 1),
             "'data.gpu_decode_priority': a green context's stream");
  EXPECT_EQ(error_for({}, false, 4), "");
}

TEST(Config, SetOverridesFileAndValidates) {
  test::TempDir dir;
  test::write_file(dir.file("c.yaml"), "optim:\n  lr: 0.5\n");
  const Config c = load_config(dir.file("c.yaml"), {"optim.lr=0.25", "model.name=vit_tiny_patch16_224",
                                                    "data.mean=[0.1]", "run.deterministic=true"});
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.25);
  EXPECT_EQ(c.model.name, "vit_tiny_patch16_224");
  EXPECT_EQ(c.data.mean, std::vector<double>{0.1});
  EXPECT_TRUE(c.run.deterministic);
  const std::string file = "run:\n  seed: 1\n";
  expect_has(load_error(file, {"optim.lr=abc"}), "--set: key 'optim.lr': expected a number");
  expect_has(load_error(file, {"optim.lrr=1"}), "unknown key 'optim.lrr'");
  expect_has(load_error(file, {"optim.lrr=1"}), "optim.lr");
  expect_has(load_error(file, {"no_equals_sign"}), "expected key.path=value");
}

TEST(Config, PrintedYamlReadsBackIdentically) {
  Config c = config_from_overrides({"optim.lr=0.123456789", "model.name=a \"quoted\" name", "data.std=[0.3]",
                                    "optim.milestones=[]"});
  test::TempDir dir;
  test::write_file(dir.file("out.yaml"), config_to_yaml(c, /*with_docs=*/true));
  const Config back = load_config(dir.file("out.yaml"));
  EXPECT_EQ(config_to_yaml(back), config_to_yaml(c));
  EXPECT_EQ(back.model.name, "a \"quoted\" name");
  EXPECT_TRUE(back.optim.milestones.empty());
}

TEST(Config, DocsMentionEveryKey) {
  const std::string docs = config_to_yaml(Config(), true);
  expect_has(docs, "lr: 0.20000000000000001  # peak learning rate");
  expect_has(docs, "precision: \"bf16\"  # autocast precision on CUDA (one of: bf16, fp16, fp32)");
}

}  // namespace
}  // namespace trainer

namespace trainer {
namespace {

// Found by fuzz_smoke: a mapping used as a key made yaml-cpp throw its own exception out of the loader.
TEST(ConfigErrors, NonScalarKeyIsAConfigError) {
  const std::string e = load_error("data: {source: image_folder, ? [a, b] : 1}\n");
  EXPECT_NE(e.find("c.yaml:1: a 'data' key is not a plain name"), std::string::npos) << e;
  const std::string top = load_error("? {x: 1}\n: 2\n");
  EXPECT_NE(top.find("a top-level key is not a plain name"), std::string::npos) << top;
}

}  // namespace
}  // namespace trainer
