#include "fuzz_targets.h"

#include <png.h>
#include <jpeglib.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "core/check.h"
#include "core/fs.h"
#include "data/cifar.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/image_ops.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_encoder.h"
#include "data/shards.h"
#include "models/safetensors.h"
#include "observe/tfevents.h"

namespace trainer::fuzz {
namespace {

// Readers that take a path get the bytes through one scratch file per process.
std::string scratch(const std::string& ext) {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/trainer_fuzz_XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    return std::string(d ? d : "/tmp");
  }();
  return dir + "/input" + ext;
}
std::string to_file(const uint8_t* data, size_t size, const std::string& ext) {
  const std::string p = scratch(ext);
  FILE* f = std::fopen(p.c_str(), "wb");
  TRAINER_CHECK(f, "cannot write ", p);
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return p;
}

// ---- seeds made here, so the corpus needs no files in the repository ----
std::string make_jpeg(int w, int h, int comps, bool progressive, int restart_mcus = 0) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  jpeg_mem_dest(&c, &buf, &len);
  c.image_width = w;
  c.image_height = h;
  c.input_components = comps;
  c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 4 ? JCS_CMYK : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 80, TRUE);
  if (progressive) jpeg_simple_progression(&c);
  c.restart_interval = static_cast<unsigned>(restart_mcus);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(w) * comps);
  while (c.next_scanline < c.image_height) {
    for (int x = 0; x < w * comps; ++x) row[x] = static_cast<uint8_t>((x * 7 + c.next_scanline * 13) & 0xFF);
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<char*>(buf), len);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

std::string make_png(int w, int h, int color_type, int depth) {
  std::string out;
  png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(p);
  if (setjmp(png_jmpbuf(p))) {
    png_destroy_write_struct(&p, &info);
    return out;
  }
  png_set_write_fn(
      p, &out, [](png_structp s, png_bytep d, png_size_t n) {
        static_cast<std::string*>(png_get_io_ptr(s))->append(reinterpret_cast<char*>(d), n);
      },
      nullptr);
  png_set_IHDR(p, info, w, h, depth, color_type, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(p, info);
  const int channels = color_type == PNG_COLOR_TYPE_GRAY ? 1 : color_type == PNG_COLOR_TYPE_RGB ? 3 : 4;
  std::vector<uint8_t> row(static_cast<size_t>(w) * channels * (depth / 8));
  for (int y = 0; y < h; ++y) {
    for (size_t i = 0; i < row.size(); ++i) row[i] = static_cast<uint8_t>(i * 3 + y);
    png_write_row(p, row.data());
  }
  png_write_end(p, nullptr);
  png_destroy_write_struct(&p, &info);
  return out;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string read_back(const std::string& path) { return fs::read_text(path); }

// ---- targets ----
void run_jpeg(const uint8_t* d, size_t n) {
  try {
    JpegDecoder dec;
    const JpegInfo info = dec.read_info(d, n, "fuzz.jpg");
    RgbImage img;
    JpegDecodeOptions o;
    dec.decode(d, n, o, img, "fuzz.jpg");
    o.scale_denom = 4;  // DCT-scaled, crop-only: the training path (cut out first where it has restart markers)
    o.crop = true;
    o.window = {info.width / 4, info.height / 3, std::max(1, info.width / 2), std::max(1, info.height / 2)};
    dec.decode(d, n, o, img, "fuzz.jpg");
    std::vector<uint8_t> rewritten;  // trainer pack's lossless rewrite, then the cut of its output
    if (transcode_with_restarts(d, n, rewritten, "fuzz.jpg")) {
      o.scale_denom = 1;
      dec.decode(rewritten.data(), rewritten.size(), o, img, "fuzz.jpg");
    }
  } catch (const Error&) {
  }
}
std::vector<std::string> seeds_jpeg() {
  return {make_jpeg(16, 16, 3, false), make_jpeg(33, 17, 3, true), make_jpeg(24, 8, 1, false),
          make_jpeg(16, 16, 4, false), make_jpeg(48, 40, 3, false, 1), make_jpeg(40, 33, 1, false, 5),
          make_jpeg(64, 48, 3, false, 4)};
}

void run_png(const uint8_t* d, size_t n) {
  try {
    RgbImage img;
    decode_png(d, n, img, "fuzz.png");
  } catch (const Error&) {
  }
}
std::vector<std::string> seeds_png() {
  return {make_png(8, 8, PNG_COLOR_TYPE_RGB, 8), make_png(5, 3, PNG_COLOR_TYPE_GRAY, 8),
          make_png(4, 4, PNG_COLOR_TYPE_RGB_ALPHA, 16)};
}

void run_idx(const uint8_t* d, size_t n) {
  try {
    read_idx(to_file(d, n, ".idx"));
  } catch (const Error&) {
  }
}
std::vector<std::string> seeds_idx() {
  std::string images = std::string("\0\0\x08\x03", 4) + be32(2) + be32(3) + be32(3) + std::string(18, '\x7f');
  std::string labels = std::string("\0\0\x08\x01", 4) + be32(4) + std::string("\x01\x02\x03\x09", 4);
  return {images, labels};
}

void run_cifar(const uint8_t* d, size_t n) {
  try {
    parse_cifar(d, n, 1, "fuzz.bin");
    parse_cifar(d, n, 2, "fuzz.bin");
  } catch (const Error&) {
  }
}
std::vector<std::string> seeds_cifar() {
  std::string rec(1 + 3072, '\x40');
  rec[0] = 7;
  return {rec + rec};
}

void run_safetensors(const uint8_t* d, size_t n) {
  try {
    parse_safetensors(d, n, "fuzz.safetensors");
  } catch (const Error&) {
  }
}
std::vector<std::string> seeds_safetensors() {
  const std::string p = scratch(".seed.safetensors");
  write_safetensors(p, {{"w", torch::arange(6, torch::kFloat32).reshape({2, 3})}, {"b", torch::ones({3}, torch::kBFloat16)},
                        {"i", torch::arange(4, torch::kInt64)}},
                    {{"format", "pt"}});
  return {read_back(p)};
}

void run_checkpoint(const uint8_t* d, size_t n) {
  try {
    read_checkpoint(to_file(d, n, ".ckpt"));
  } catch (const Error&) {
  }
}
std::vector<std::string> seeds_checkpoint() {
  CheckpointState s;
  s.tensors = {{"model.w", torch::randn({3, 2})}, {"rng.cpu", torch::arange(8).to(torch::kUInt8)}};
  s.epoch = 1;
  s.batch = 2;
  s.step = 3;
  s.config_yaml = "run:\n  name: x\n";
  const std::string p = scratch(".seed.ckpt");
  write_checkpoint(p, s);
  return {read_back(p)};
}

void run_tfrecord(const uint8_t* d, size_t n) {
  try {
    read_tfrecords(to_file(d, n, ".tfevents"));
  } catch (const Error&) {
  }
}
std::vector<std::string> seeds_tfrecord() {
  const std::string dir = scratch(".tb");
  fs::make_dirs(dir);
  std::string path;
  {
    EventWriter w(dir);
    w.scalars(1, {{"a", 1.0}, {"b/c", 2.5}});
    path = w.path();
  }
  const std::string out = read_back(path);
  ::unlink(path.c_str());
  return {out};
}

void run_list(const uint8_t* d, size_t n) {
  try {
    read_list_file(to_file(d, n, ".list"), "/data");
  } catch (const Error&) {
  }
}
std::vector<std::string> seeds_list() { return {"a/x.jpg,0\nb/y.png, 3\n\n# comment\nc.jpg,12\n"}; }

// A tar shard from memory: members, WebDataset grouping, .cls parsing; then its index text, as written and parsed.
void run_tar(const uint8_t* d, size_t n) {
  const ReadAt read = [d, n](int64_t off, size_t len, uint8_t* dst) {
    TRAINER_CHECK(off >= 0 && static_cast<size_t>(off) <= n && len <= n - static_cast<size_t>(off), "read past end");
    std::memcpy(dst, d + off, len);
  };
  try {
    const auto samples = index_tar(read, static_cast<int64_t>(n), "fuzz.tar");
    const auto again = parse_shard_index(format_shard_index(samples, static_cast<int64_t>(n)), "fuzz.idx",
                                         static_cast<int64_t>(n));
    TRAINER_CHECK(again.size() == samples.size(), "index round trip lost samples");  // would be a finding
  } catch (const Error&) {
  }
}
std::vector<std::string> seeds_tar() {
  const std::string dir = scratch(".shards");
  fs::make_dirs(dir);
  {
    ShardWriter w(dir, 2, 1 << 20);
    w.add("000000000", "jpg", std::vector<uint8_t>{0xff, 0xd8, 0xff, 0xd9}, 3);
    w.add("000000001", "png", std::vector<uint8_t>(700, 7), 12);
    w.add("000000002", "jpg", std::vector<uint8_t>(3, 1), 0);
    w.finish();
  }
  return {read_back(dir + "/shard-000000.tar"), read_back(dir + "/shard-000001.tar")};
}

void run_shard_index(const uint8_t* d, size_t n) {
  try {
    parse_shard_index(std::string(reinterpret_cast<const char*>(d), n), "fuzz.idx", 1 << 20);
  } catch (const Error&) {
  }
}
std::vector<std::string> seeds_shard_index() {
  return {"trainer-shard-index 1 2 1048576\n512 4 3 000000000.jpg\n2048 700 12 a/b.png\n"};
}

void run_config(const uint8_t* d, size_t n) {
  try {
    load_config(to_file(d, n, ".yaml"));
  } catch (const ConfigError&) {
  } catch (const Error&) {
  }
}
std::vector<std::string> seeds_config() {
  return {config_to_yaml(Config{}), "model:\n  name: resnet50\noptim:\n  lr: 0.1\n  betas: [0.9, 0.95]\n",
          "data: {source: image_folder, rrc_scale: [0.08, 1.0]}\n"};
}

}  // namespace

const std::vector<Target>& targets() {
  static const std::vector<Target> t = {
      {"jpeg", run_jpeg, seeds_jpeg},
      {"png", run_png, seeds_png},
      {"idx", run_idx, seeds_idx},
      {"cifar", run_cifar, seeds_cifar},
      {"safetensors", run_safetensors, seeds_safetensors},
      {"checkpoint", run_checkpoint, seeds_checkpoint},
      {"tfrecord", run_tfrecord, seeds_tfrecord},
      {"list", run_list, seeds_list},
      {"tar", run_tar, seeds_tar},
      {"shard_index", run_shard_index, seeds_shard_index},
      {"config", run_config, seeds_config},
  };
  return t;
}

const Target* find_target(const std::string& name) {
  for (const auto& t : targets())
    if (name == t.name) return &t;
  return nullptr;
}

}  // namespace trainer::fuzz
