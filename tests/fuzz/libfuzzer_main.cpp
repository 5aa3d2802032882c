// libFuzzer entry: built once per target by scripts/fuzz.sh with clang (-fsanitize=fuzzer,address) and
// -DTRAINER_FUZZ_TARGET=\"jpeg\" etc.
#include <cstdlib>
#include <cstdio>

#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const trainer::fuzz::Target* t = [] {
    const auto* found = trainer::fuzz::find_target(TRAINER_FUZZ_TARGET);
    if (!found) {
      std::fprintf(stderr, "unknown fuzz target %s\n", TRAINER_FUZZ_TARGET);
      std::abort();
    }
    return found;
  }();
  t->run(data, size);
  return 0;
}
