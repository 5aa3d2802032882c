#include "data/pack.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>

#include "core/check.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/strings.h"
#include "data/image_folder.h"
#include "data/image_loader.h"
#include "data/image_ops.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_encoder.h"
#include "data/shards.h"

namespace trainer {
namespace {

int64_t parse_int(const std::string& opt, const std::string& v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || x < lo || x > hi)
    throw ConfigError(str_cat("pack ", opt, ": expected an integer in [", lo, ", ", hi, "], got '", v, "'"));
  return x;
}

// --huffman: true for the standard tables
bool parse_huffman(const std::string& v) {
  if (v != "fitted" && v != "standard")
    throw ConfigError(str_cat("pack --huffman: expected fitted or standard, got '", v, "'"));
  return v == "standard";
}

struct Packed {
  std::vector<uint8_t> bytes;
  std::string ext;
  bool ok = false, reencoded = false, transcoded = false;
  int64_t in_bytes = 0;
  std::string error;
};

HuffmanTables huffman_tables(const PackOptions& o) {
  return o.standard_huffman ? HuffmanTables::standard : HuffmanTables::fitted;
}

// One sample: the file as it is, or decoded, shrunk and re-encoded.
void pack_one(const ImageSample& s, const PackOptions& o, JpegDecoder& jpeg, Packed& p) {
  std::vector<uint8_t> file;
  read_sample_bytes(s, file);
  p.in_bytes = static_cast<int64_t>(file.size());
  const ImageFormat fmt = sniff_format(file.data(), file.size());
  TRAINER_CHECK(fmt == ImageFormat::jpeg || fmt == ImageFormat::png, s.path, ": not a JPEG or PNG file");
  const int quality = o.quality > 0 ? o.quality : (o.max_side > 0 ? 90 : 0);
  RgbImage img;
  if (quality > 0 || fmt == ImageFormat::png) {
    // decode fully: validates the file, and is needed to shrink or re-encode
    if (fmt == ImageFormat::jpeg) jpeg.decode(file.data(), file.size(), JpegDecodeOptions{}, img, s.path);
    else decode_png(file.data(), file.size(), img, s.path);
  } else if (o.restart_markers) {
    // reads every coefficient (validates the whole file), writes them back with restart markers
    std::vector<uint8_t> rewritten;
    if (transcode_with_restarts(file.data(), file.size(), rewritten, s.path, 1, huffman_tables(o))) {
      file = std::move(rewritten);
      p.transcoded = true;
    }
  } else {
    int w = 0, h = 0;
    read_image_size(jpeg, file.data(), file.size(), s.path, &w, &h);  // a readable header within the pixel limit
  }
  if (quality <= 0) {
    p.bytes = std::move(file);
    p.ext = fmt == ImageFormat::jpeg ? "jpg" : "png";
    p.ok = true;
    return;
  }
  if (o.max_side > 0 && std::max(img.width, img.height) > o.max_side) {
    const double f = static_cast<double>(o.max_side) / std::max(img.width, img.height);
    RgbImage small;
    small.width = std::max(1, static_cast<int>(std::lround(img.width * f)));
    small.height = std::max(1, static_cast<int>(std::lround(img.height * f)));
    small.pixels.resize(static_cast<size_t>(small.width) * small.height * 3);
    resize_rgb(img.pixels.data(), img.width, img.height, Rect{0, 0, img.width, img.height}, small.pixels.data(),
               small.width, small.height, small.width * 3, /*flip=*/false);
    img = std::move(small);
  }
  encode_jpeg(img, quality, p.bytes, s.path, o.restart_markers ? 1 : 0, huffman_tables(o));
  p.ext = "jpg";
  p.reencoded = true;
  p.ok = true;
}

}  // namespace

std::string pack_usage() {
  return "usage: trainer pack --src <ImageFolder root | list file> --out <folder> [--root DIR] [--max-side N]\n"
         "                    [--quality Q] [--shard-size N] [--shard-mb M] [--no-shuffle] [--seed S] [--threads T]\n"
         "                    [--no-restart-markers] [--huffman fitted|standard]\n"
         "  --src         class folders (ImageFolder) or a list file of 'path,label' lines\n"
         "  --root        list file: the folder its paths are relative to (default: the list's folder)\n"
         "  --out         where shard-NNNNNN.tar, their .idx and classes.txt are written\n"
         "  --max-side    shrink images whose longer side exceeds N, re-encoding them as JPEG\n"
         "  --quality     re-encode every image as JPEG at Q (1-100); with --max-side alone Q is 90\n"
         "  --no-restart-markers  keep JPEG files byte for byte (default: rewritten losslessly, same pixels, with a\n"
         "                restart marker after every MCU so that crop decoding reads only the crop's share)\n"
         "  --huffman     the Huffman tables of the JPEGs written: fitted to each (default, smallest) or the\n"
         "                standard ones for all, about 6% larger, so that files of one quality can be decoded\n"
         "                as mosaics of crop windows on the GPU (data.gpu_decode_mosaic)\n"
         "  --shard-size  samples per shard (default 5000); --shard-mb: MiB per shard (default 1024)\n"
         "  --no-shuffle  keep the source order (default: shuffled by --seed, 0)\n";
}

PackOptions parse_pack_args(const std::vector<std::string>& args) {
  PackOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], v;
    const bool has_value = a.find('=') != std::string::npos;
    if (has_value) v = a.substr(a.find('=') + 1), a = a.substr(0, a.find('='));
    auto value = [&]() -> std::string {
      if (has_value) return v;
      if (i + 1 >= args.size()) throw ConfigError(str_cat("pack ", a, " needs a value"));
      return args[++i];
    };
    if (a == "--src") o.src = value();
    else if (a == "--root") o.root = value();
    else if (a == "--out") o.out = value();
    else if (a == "--max-side") o.max_side = static_cast<int>(parse_int(a, value(), 8, 1 << 16));
    else if (a == "--quality") o.quality = static_cast<int>(parse_int(a, value(), 1, 100));
    else if (a == "--shard-size") o.shard_samples = parse_int(a, value(), 1, int64_t(1) << 40);
    else if (a == "--shard-mb") o.shard_mb = parse_int(a, value(), 1, int64_t(1) << 30);
    else if (a == "--seed") o.seed = static_cast<uint64_t>(parse_int(a, value(), 0, INT64_MAX));
    else if (a == "--threads") o.threads = static_cast<int>(parse_int(a, value(), 0, 4096));
    else if (a == "--no-shuffle") o.shuffle = false;
    else if (a == "--no-restart-markers") o.restart_markers = false;
    else if (a == "--huffman") o.standard_huffman = parse_huffman(value());
    else throw ConfigError(str_cat("pack: unknown option '", args[i], "'\n", pack_usage()));
  }
  if (o.src.empty() || o.out.empty()) throw ConfigError("pack needs --src and --out\n" + pack_usage());
  if (!fs::exists(o.src)) throw ConfigError(str_cat("pack --src ", o.src, ": no such file or folder"));
  return o;
}

PackStats pack_dataset(const PackOptions& o, const std::function<void(int64_t, int64_t)>& progress) {
  const ImageList list = fs::is_dir(o.src)
                             ? scan_image_folder(o.src)
                             : read_list_file(o.src, o.root.empty() ? fs::parent_path(o.src) : o.root);
  TRAINER_CHECK(!list.samples.empty(), o.src, ": no images");
  std::vector<size_t> order(list.samples.size());
  std::iota(order.begin(), order.end(), size_t(0));
  if (o.shuffle) {
    std::mt19937_64 g(o.seed);
    std::shuffle(order.begin(), order.end(), g);
  }
  fs::make_dirs(o.out);
  if (!list.classes.empty()) fs::write_text_atomic(fs::join_path(o.out, "classes.txt"), join(list.classes, "\n") + "\n");
  ShardWriter writer(o.out, o.shard_samples, o.shard_mb << 20);
  const int threads = o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  PackStats st;
  const size_t n = order.size(), chunk = static_cast<size_t>(threads) * 32;
  std::vector<Packed> done(chunk);
  std::vector<JpegDecoder> jpegs(static_cast<size_t>(threads));  // one per worker thread
  for (size_t base = 0; base < n; base += chunk) {
    const size_t m = std::min(chunk, n - base);
    parallel_for_workers(static_cast<int64_t>(m), threads, [&](int64_t k, int worker) {
      Packed& p = done[static_cast<size_t>(k)];
      p = Packed{};
      try {
        pack_one(list.samples[order[base + static_cast<size_t>(k)]], o, jpegs[static_cast<size_t>(worker)], p);
      } catch (const std::exception& e) {
        p.error = e.what();
      }
    });
    for (size_t k = 0; k < m; ++k) {  // written in order: the output depends on the seed only
      Packed& p = done[k];
      const ImageSample& s = list.samples[order[base + k]];
      if (!p.ok) {
        ++st.skipped;
        log::warn("pack: skipping ", p.error.empty() ? s.path : p.error);
        continue;
      }
      writer.add(strprintf("%09lld", static_cast<long long>(st.samples)), p.ext, p.bytes, s.label);
      ++st.samples;
      st.reencoded += p.reencoded;
      st.transcoded += p.transcoded;
      st.bytes_in += p.in_bytes;
    }
    if (progress) progress(static_cast<int64_t>(base + m), static_cast<int64_t>(n));
  }
  writer.finish();
  st.shards = writer.shards();
  st.bytes_out = writer.bytes_written();
  TRAINER_CHECK(st.samples > 0, o.src, ": every image failed to read (", st.skipped, " skipped)");
  return st;
}

}  // namespace trainer
