// trainer: the command-line entry point. Loads the config, builds the parts, runs the command, exits.
// Exit codes: 0 success, 1 runtime failure, 2 bad config or command line (then nothing is written).
#ifdef TRAINER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <exception>
#include <iostream>

#include "config/cli.h"
#include "config/config.h"
#include "core/check.h"
#include "core/fs.h"
#include "core/log.h"
#include "checkpoint/checkpoint.h"
#include "core/signals.h"
#include "core/strings.h"
#include "data/pack.h"
#include "observe/progress.h"
#include "distributed/rank_env.h"
#include "distributed/launcher.h"
#include "distributed/process_group.h"
#include "engine/bench.h"
#include "engine/trainer.h"
#include "models/safetensors.h"
#include "models/weights.h"
#include "runtime/env.h"

namespace {

const std::vector<trainer::CommandSpec> kCommands = {
    {"train", "train a model from a config (the default command)"},
    {"eval", "evaluate --weights W on the config's eval split (top-1, top-5, loss)"},
    {"bench", "time training steps (synthetic batches on the device; bench.data: pipeline feeds them from the "
              "data config); --out FILE writes JSON"},
    {"launch", "start --nproc-per-node N ranks of trainer with torchrun's variables: launch [opts] -- <args>"},
    {"export", "write the model of --checkpoint C as safetensors (timm names) to --out FILE"},
    {"bench-data", "time the image input pipeline alone (the config's training split); --out FILE writes JSON"},
    {"pack", "write an ImageFolder or list file as WebDataset tar shards with indexes: pack --src S --out D [opts]"},
};

// `trainer pack`: its own options (see pack_usage()), a progress bar, a summary.
int run_pack(const std::vector<std::string>& args) {
  using namespace trainer;
  if (std::find(args.begin(), args.end(), "--help") != args.end() || std::find(args.begin(), args.end(), "-h") != args.end()) {
    std::cout << pack_usage();
    return 0;
  }
  const PackOptions o = parse_pack_args(args);
  ProgressBar bar;
  const auto t0 = std::chrono::steady_clock::now();
  const PackStats st = pack_dataset(o, [&](int64_t done, int64_t total) {
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ProgressState p;
    p.epoch = p.epochs = 1;
    p.step = done;
    p.steps = total;
    p.img_per_s = sec > 0 ? done / sec : 0;
    p.eta_s = done > 0 ? sec * (total - done) / done : -1;
    bar.update(p);
  });
  bar.done();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << strprintf("packed %lld images into %lld shard(s) in %s: %.1f MiB of images -> %.1f MiB of tar "
                         "(%lld re-encoded, %lld rewritten losslessly; restart markers %s), %lld skipped; %s\n",
                         static_cast<long long>(st.samples), static_cast<long long>(st.shards),
                         format_duration(sec).c_str(), st.bytes_in / 1048576.0, st.bytes_out / 1048576.0,
                         static_cast<long long>(st.reencoded), static_cast<long long>(st.transcoded),
                         o.restart_markers ? "on" : "off", static_cast<long long>(st.skipped), o.out.c_str());
  return 0;
}

// Every file argument exists and is a file, before anything is built or written (exit 2 otherwise).
void check_input_files(const trainer::CommandLine& cl, const trainer::Config& cfg) {
  using namespace trainer;
  auto check = [](const std::string& path, const std::string& what, const std::string& expected) {
    if (path.empty()) return;
    if (fs::is_dir(path)) throw ConfigError(str_cat(what, " ", path, ": is a folder; expected ", expected));
    if (!fs::exists(path)) throw ConfigError(str_cat(what, " ", path, ": no such file; expected ", expected));
  };
  check(cl.weights, "--weights", "a safetensors file");
  check(cl.command == "export" ? cl.checkpoint : std::string(), "--checkpoint", "a checkpoint file");
  check(cfg.model.pretrained, "key 'model.pretrained':", "a safetensors file");
  if (cfg.checkpoint.resume != "auto")
    check(cfg.checkpoint.resume, "--resume (checkpoint.resume)",
          "a checkpoint file, or auto for the newest one in the run folder");
  // an ImageFolder that is not there: say how to lay one out (commands that read no data skip this)
  const DataConfig& d = cfg.data;
  const bool reads_data = cl.command != "export" && (cl.command != "bench" || cfg.bench.data == "pipeline");
  if (d.source == "image_folder" && reads_data)
    for (const std::string& split : {d.train_split, d.eval_split}) {
      const bool needed = cl.command == "eval"                                  ? split == d.eval_split
                          : cl.command == "bench" || cl.command == "bench-data" ? split == d.train_split
                                                                                : true;
      if (split.empty() || !needed) continue;
      const std::string folder = fs::join_path(d.root, split);
      if (!fs::is_dir(folder))
        throw ConfigError(str_cat(
            "key 'data.root': ", folder, " is not a folder; expected torchvision's ImageFolder layout, ", d.root, "/",
            split, "/<class>/<image>.jpg (ImageNet: ILSVRC2012 train/ and val/ with one folder per class, e.g. "
            "n01440764/), or set data.root to where it is. `trainer pack --src ", d.root, "/", split,
            " --out DIR` then makes tar shards that decode faster (data.source: shards)"));
    }
}

int run(int argc, char** argv) {
  using namespace trainer;
  request_cuda_work_queues(32);  // before anything starts CUDA; a value the user set wins
  if (argc > 1 && std::string(argv[1]) == "launch") {
    // the launcher runs this very binary once per rank; /proc/self/exe survives a relative argv[0]
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    const std::string program = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]);
    const LaunchOptions o = parse_launch_args(std::vector<std::string>(argv + 2, argv + argc), program);
    if (o.help) {
      std::cout << launch_usage();
      return 0;
    }
    return launch(o);
  }
  if (argc > 1 && std::string(argv[1]) == "pack") return run_pack(std::vector<std::string>(argv + 2, argv + argc));
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
  if (cl.command == "eval" && cl.weights.empty()) throw ConfigError("eval needs --weights FILE");
  check_input_files(cl, cfg);
  if (cl.command == "export") {
    if (cl.checkpoint.empty() || cl.out.empty()) throw ConfigError("export needs --checkpoint FILE and --out FILE");
    const CheckpointState s = read_checkpoint(cl.checkpoint);
    std::vector<std::pair<std::string, torch::Tensor>> model;
    for (const auto& kv : s.tensors)
      if (starts_with(kv.first, "model.")) model.emplace_back(kv.first.substr(6), kv.second);
    write_safetensors(cl.out, model, {{"format", "pt"}, {"step", std::to_string(s.step)}});
    std::cout << "exported " << model.size() << " tensors of step " << s.step << " to " << cl.out << "\n";
    return 0;
  }
  log::set_level(log::parse_level(cfg.run.log_level));

  // ---- one process per GPU: rendezvous from torchrun / mpirun / Slurm variables ----
  const auto env = process_env();
  const DistEnv denv = parse_dist_env(env);
  RunContext ctx;
  ctx.device = select_device(cfg.run.device, denv.local_rank);
  set_cuda_sync(cfg.run.cuda_sync, ctx.device);
  std::unique_ptr<DistContext> dist;
  if (denv.launcher != "none") {  // also for world size 1: the same code path as a real job
    log::set_rank(denv.rank, denv.world_size);
#ifdef TRAINER_WITH_CUDA
    if (ctx.device.is_cuda()) c10::cuda::set_device(ctx.device.index());
#endif
    dist = std::make_unique<DistContext>(denv, ctx.device, std::chrono::seconds(cfg.run.dist_timeout_s));
    ctx.rank = denv.rank;
    ctx.world_size = denv.world_size;
    ctx.local_world_size = denv.local_world_size;
    ctx.dist = dist.get();
  }
  // On the GPU no CPU math runs in the hot loop; one intra-op thread keeps OpenMP workers from competing with
  // the decode threads for cores.
  if (ctx.device.is_cuda()) at::set_num_threads(1);
  const int cpu_threads = cpu_threads_per_rank(denv, env, static_cast<int>(std::thread::hardware_concurrency()));
  if (!ctx.device.is_cuda() && cpu_threads > 0) {
    at::set_num_threads(cpu_threads);
    log::info(cpu_threads, " intra-op threads for this rank: the machine's cores shared by its ", denv.local_world_size,
              " ranks (OMP_NUM_THREADS overrides)");
  }

  if (cl.command == "bench") {
    const BenchResult r = run_bench(cfg, ctx);
    if (ctx.writer()) {
      std::cout << r.json << std::endl;
      if (!cl.out.empty()) fs::write_text_atomic(cl.out, r.json + "\n");
    }
    return 0;
  }
  if (cl.command == "bench-data") {
    const DataBenchResult r = run_bench_data(cfg, ctx);
    std::cout << r.json << std::endl;
    if (!cl.out.empty()) fs::write_text_atomic(cl.out, r.json + "\n");
    return 0;
  }
  if (cl.command == "eval") {
    Trainer t(cfg, ctx);
    load_weights(*t.model(), cl.weights, LoadMode::strict);
    const EvalResult e = t.evaluate();
    TRAINER_CHECK(e.samples > 0, "nothing to evaluate: data.eval_split is empty");
    std::cout << strprintf("eval %s: top1 %.2f%% top5 %.2f%% loss %.4f on %lld images", cl.weights.c_str(), e.top1,
                           e.top5, e.loss, static_cast<long long>(e.samples))
              << (e.bad_samples > 0 ? strprintf(" (%lld unreadable files left out)", static_cast<long long>(e.bad_samples))
                                    : std::string())
              << "\n";
    return 0;
  }
  Trainer t(cfg, ctx);
  return t.fit().preempted ? kExitPreempted : 0;
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
