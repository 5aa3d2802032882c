// A bounded fuzzing run without libFuzzer, for CI: `fuzz_smoke TARGET SECONDS [--runs N] [--corpus DIR]` runs the
// target's generated seeds, then mutated inputs (bit flips, special bytes, truncation, duplication, insertion,
// splicing) from a fixed-seed generator until N inputs ran or the time is up. With --runs the sequence is the same
// on every machine, so a CI result reproduces anywhere. A crash, a non-trainer exception, an input that takes more
// than 10 s, or an allocation past the address-space limit (16 GiB) fails the run, and the input is written to
// fuzz-crash-<target>.bin for replay (`fuzz_smoke TARGET 0 --replay FILE`). With --corpus the seeds are also
// written there, as a starting corpus for libFuzzer.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <random>
#include <string>

#include "core/fs.h"
#include "fuzz_targets.h"

namespace {

const std::string* g_input = nullptr;
char g_crash_path[256];

void dump_and_die(const char* why) {
  // async-signal-safe: open/write/_exit only
  if (g_input) {
    const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ssize_t ignored = ::write(fd, g_input->data(), g_input->size());
      (void)ignored;
      ::close(fd);
    }
  }
  ssize_t ignored = ::write(2, why, std::strlen(why));
  ignored = ::write(2, g_crash_path, std::strlen(g_crash_path));
  ignored = ::write(2, "\n", 1);
  (void)ignored;
  ::_exit(1);
}
void on_signal(int sig) {
  dump_and_die(sig == SIGALRM ? "fuzz_smoke: an input took more than 10 s; written to "
                              : "fuzz_smoke: crash (signal); input written to ");
}

std::string mutate(const std::string& in, const std::vector<std::string>& pool, std::mt19937_64& rng) {
  std::string s = in;
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  const int rounds = 1 + static_cast<int>(rng() % 4);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 7) {
      case 0:
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1: {
        static const unsigned char special[] = {0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE, 0x10};
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(special[rng() % sizeof(special)]);
        break;
      }
      case 2:
        if (!s.empty()) s.resize(pick(s.size()));
        break;
      case 3:
        if (!s.empty()) {
          const size_t a = pick(s.size()), len = 1 + pick(std::min<size_t>(64, s.size() - a));
          s.insert(pick(s.size()), s.substr(a, len));
        }
        break;
      case 4: {
        std::string junk(1 + pick(16), '\0');
        for (auto& c : junk) c = static_cast<char>(rng());
        s.insert(pick(s.size() + 1), junk);
        break;
      }
      case 5: {  // a 4-byte field set to a large or boundary value: sizes and counts in headers
        if (s.size() >= 4) {
          static const uint32_t v[] = {0xFFFFFFFFu, 0x7FFFFFFFu, 0x80000000u, 100000u, 0u, 65535u};
          const uint32_t x = v[rng() % 6];
          std::memcpy(&s[pick(s.size() - 3)], &x, 4);
        }
        break;
      }
      case 6: {
        const std::string& other = pool[pick(pool.size())];
        if (!other.empty()) s = s.substr(0, pick(s.size() + 1)) + other.substr(pick(other.size()));
        break;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_smoke TARGET SECONDS [--runs N] [--corpus DIR] [--replay FILE]\ntargets:");
    for (const auto& t : trainer::fuzz::targets()) std::fprintf(stderr, " %s", t.name);
    std::fprintf(stderr, "\n");
    return 2;
  }
  std::string corpus, replay;
  long long max_runs = -1;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--runs") max_runs = std::atoll(argv[i + 1]);
    else if (a == "--corpus") corpus = argv[i + 1];
    else if (a == "--replay") replay = argv[i + 1];
    else {
      std::fprintf(stderr, "fuzz_smoke: unknown option '%s'\n", a.c_str());
      return 2;
    }
  }
  const auto* target = trainer::fuzz::find_target(argv[1]);
  if (!target) {
    std::fprintf(stderr, "fuzz_smoke: unknown target '%s'\n", argv[1]);
    return 2;
  }
  const double seconds = std::atof(argv[2]);
  std::snprintf(g_crash_path, sizeof(g_crash_path), "fuzz-crash-%s.bin", target->name);
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  constexpr bool kAsan = true;
#else
  constexpr bool kAsan = false;
#endif
#else
  constexpr bool kAsan = false;
#endif
  if (!kAsan) {  // ASan reserves terabytes of shadow address space; it has its own allocation limits
    rlimit as{16ull << 30, 16ull << 30};
    ::setrlimit(RLIMIT_AS, &as);
  }
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGALRM}) ::signal(sig, on_signal);
  std::set_terminate([] {
    try {
      if (auto e = std::current_exception()) std::rethrow_exception(e);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz_smoke: uncaught %s\n", e.what());
    } catch (...) {
    }
    dump_and_die("fuzz_smoke: an exception other than trainer::Error; input written to ");
  });

  auto run_one = [&](const std::string& input) {
    g_input = &input;
    ::alarm(10);
    target->run(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    ::alarm(0);
    g_input = nullptr;
  };
  if (!replay.empty()) {
    run_one(trainer::fs::read_text(replay));
    std::printf("fuzz_smoke %s: replay ok\n", target->name);
    return 0;
  }
  const std::vector<std::string> seeds = target->seeds();
  if (!corpus.empty()) {
    trainer::fs::make_dirs(corpus);
    for (size_t i = 0; i < seeds.size(); ++i)
      trainer::fs::write_text_atomic(trainer::fs::join_path(corpus, "seed-" + std::to_string(i)), seeds[i]);
  }
  for (const auto& s : seeds) run_one(s);
  std::mt19937_64 rng(std::hash<std::string>{}(target->name));
  const auto t0 = std::chrono::steady_clock::now();
  int64_t n = 0;
  while ((max_runs < 0 || n < max_runs) &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    run_one(mutate(seeds[static_cast<size_t>(rng() % seeds.size())], seeds, rng));
    ++n;
  }
  std::printf("fuzz_smoke %s: %zu seeds and %lld mutated inputs in %.1f s, no crash\n", target->name, seeds.size(),
              static_cast<long long>(n),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}
