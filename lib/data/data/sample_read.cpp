#include "data/sample_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "core/check.h"
#include "core/fs.h"
#include "core/parallel.h"
#include "data/shards.h"

namespace trainer {

namespace {

constexpr int64_t kMaxSampleBytes = int64_t(1) << 30;

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

void read_file_into(const std::string& path, uint8_t* dst, size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRAINER_CHECK(fd >= 0, path, ": cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size != static_cast<off_t>(size)) {
    const long long now = st.st_size;
    ::close(fd);
    TRAINER_FAIL(path, ": changed size while being read (", size, " bytes, now ", now, ")");
  }
  const size_t got = fs::pread_full(fd, 0, size, dst);
  ::close(fd);
  TRAINER_CHECK(got == size, path, ": short read");
}

void read_member_into(const ImageSample& s, uint8_t* dst, size_t size) {
  const int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
  TRAINER_CHECK(fd >= 0, s.path, ": cannot open");
  // the member's own tar header first (data follows it directly): its checksum catches a damaged header that
  // the index would otherwise hide
  uint8_t header[512];
  const bool have_header = s.offset >= 512 && fs::pread_full(fd, s.offset - 512, sizeof(header), header) == 512;
  const size_t done = fs::pread_full(fd, s.offset, size, dst);
  ::close(fd);
  TRAINER_CHECK(have_header && tar_header_checksum_ok(header), s.name(), ": the tar header at byte ", s.offset - 512,
                " has a bad checksum (the shard is damaged, or its index does not belong to it)");
  TRAINER_CHECK(done == size, s.name(), ": short read (the shard is shorter than its index says)");
}

}  // namespace

size_t sample_byte_size(const ImageSample& s) {
  if (s.offset >= 0) {
    TRAINER_CHECK(s.size >= 0 && s.size <= kMaxSampleBytes, s.name(), ": implausible size ", s.size);
    return static_cast<size_t>(s.size);
  }
  struct stat st {};
  TRAINER_CHECK(::stat(s.path.c_str(), &st) == 0, s.path, ": cannot open");
  TRAINER_CHECK(st.st_size >= 0 && st.st_size <= kMaxSampleBytes, s.path, ": unreadable size");
  return static_cast<size_t>(st.st_size);
}

void read_sample_into(const ImageSample& s, uint8_t* dst, size_t size) {
  if (s.offset < 0) read_file_into(s.path, dst, size);
  else read_member_into(s, dst, size);
}

void read_sample_bytes(const ImageSample& s, std::vector<uint8_t>& buf) {
  buf.resize(sample_byte_size(s));
  read_sample_into(s, buf.data(), buf.size());
}

BatchBytes read_batch(const std::vector<const ImageSample*>& samples, int threads,
                      const std::function<uint8_t*(size_t)>& buffer) {
  const auto t = std::chrono::steady_clock::now();
  const auto n = static_cast<int64_t>(samples.size());
  BatchBytes r;
  r.files.assign(samples.size(), {nullptr, 0});
  r.errors.resize(samples.size());
  std::vector<size_t> size(samples.size(), 0);
  bool files = false;  // a shard's index has the sizes; files need a stat each
  for (const ImageSample* s : samples) files = files || s->offset < 0;
  parallel_for(n, files ? threads : 1, [&](int64_t i) {
    try {
      size[static_cast<size_t>(i)] = sample_byte_size(*samples[static_cast<size_t>(i)]);
    } catch (const Error& e) {
      r.errors[static_cast<size_t>(i)] = e.what();
    }
  });
  std::vector<size_t> at(samples.size() + 1, 0);
  for (size_t i = 0; i < samples.size(); ++i) at[i + 1] = at[i] + size[i];
  r.total = at.back();
  uint8_t* base = buffer(std::max<size_t>(r.total, 1));
  r.size_ms = ms_since(t);
  const auto t_read = std::chrono::steady_clock::now();
  parallel_for(n, threads, [&](int64_t i) {
    const auto k = static_cast<size_t>(i);
    if (!r.errors[k].empty()) return;
    try {
      read_sample_into(*samples[k], base + at[k], size[k]);
      r.files[k] = {base + at[k], size[k]};
    } catch (const Error& e) {
      r.errors[k] = e.what();
    }
  });
  r.read_ms = ms_since(t_read);
  return r;
}

}  // namespace trainer
