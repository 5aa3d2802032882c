#include "data/auto_augment.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <tuple>

#include "core/check.h"
#include "core/random.h"
#include "data/device_upload.h"

namespace trainer {
namespace {

constexpr uint64_t kStream = 0x5A17'0A06'3E47'0002ull;  // separates these draws from the crop/flip/jitter draws
constexpr double kPi = 3.14159265358979323846;

// torch.linspace(start, end, steps)[i] in float32 from ATen's own kernel (its vectorised and scalar parts round
// differently, so a formula would differ from torchvision's tables in the last bit), cached per thread
float linspace_at(float start, float end, int steps, int i) {
  thread_local std::map<std::tuple<float, float, int>, std::vector<float>> cache;
  std::vector<float>& v = cache[std::make_tuple(start, end, steps)];
  if (v.empty()) {
    const torch::Tensor t = torch::linspace(start, end, steps, torch::kFloat32).contiguous();
    v.assign(t.data_ptr<float>(), t.data_ptr<float>() + steps);
  }
  return v[static_cast<size_t>(i)];
}

// uint8 semantics: clamp to 0..255 then truncate, as torchvision's .to(torch.uint8) after _blend
torch::Tensor to_u8(torch::Tensor t) { return t.clamp_(0.0, 255.0).trunc_(); }

torch::Tensor grayscale_u8(const torch::Tensor& x) {  // (B,3,H,W) -> (B,1,H,W), truncated like rgb_to_grayscale
  auto c = x.unbind(1);
  return (0.2989 * c[0] + 0.587 * c[1] + 0.114 * c[2]).trunc_().unsqueeze(1);
}

torch::Tensor per_sample(const std::vector<double>& v, const torch::Tensor& like) {
  std::vector<float> f(v.begin(), v.end());
  return upload(torch::tensor(f).view({static_cast<int64_t>(f.size()), 1, 1, 1}), like.device());
}

// torchvision's _blend with factor 1 + magnitude per sample: ratio and 1 - ratio are formed in double (Python
// floats) and each rounded to float32 by the multiplication, so they are rounded here the same way
torch::Tensor blend(const torch::Tensor& a, const torch::Tensor& b, const std::vector<double>& magnitude) {
  std::vector<double> r, q;
  for (double m : magnitude) {
    r.push_back(1.0 + m);
    q.push_back(1.0 - (1.0 + m));
  }
  return to_u8(per_sample(r, a) * a + per_sample(q, a) * b);
}

// torchvision's _get_inverse_affine_matrix (angle and shear in degrees, centre relative to the image centre)
std::array<double, 6> inverse_affine(double cx, double cy, double angle, double tx, double ty, double shear_x,
                                     double shear_y) {
  const double rot = angle * kPi / 180.0, sx = shear_x * kPi / 180.0, sy = shear_y * kPi / 180.0;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  std::array<double, 6> m = {d, -b, 0.0, -c, a, 0.0};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

// torchvision's _gen_affine_grid + grid_sample(nearest, zeros, align_corners=False) with a matrix per sample
torch::Tensor warp(const torch::Tensor& x, const std::vector<std::array<double, 6>>& mats) {
  const int64_t B = x.size(0), H = x.size(2), W = x.size(3);
  std::vector<float> th;
  for (const auto& m : mats)
    for (double v : m) th.push_back(static_cast<float>(v));
  // theta rescaled on the host (the same float32 division torchvision does), then one upload
  auto rescaled = upload(torch::tensor(th).view({B, 2, 3}).transpose(1, 2) / torch::tensor({0.5f * W, 0.5f * H}),
                         x.device());
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(x.device());
  auto base = torch::empty({1, H, W, 3}, opts);
  base.select(3, 0).copy_(torch::linspace(-W * 0.5 + 0.5, W * 0.5 + 0.5 - 1, W, opts).view({1, 1, W}));
  base.select(3, 1).copy_(torch::linspace(-H * 0.5 + 0.5, H * 0.5 + 0.5 - 1, H, opts).view({1, H, 1}));
  base.select(3, 2).fill_(1.0);
  auto grid = base.view({1, H * W, 3}).expand({B, H * W, 3}).bmm(rescaled).view({B, H, W, 2});
  return torch::grid_sampler(x, grid, /*nearest*/ 1, /*zeros*/ 0, /*align_corners=*/false);
}

torch::Tensor equalize(const torch::Tensor& x) {  // torchvision's _scale_channel per (sample, channel)
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  auto v = x.reshape({B * C, H * W}).to(torch::kInt64);
  auto hist = torch::zeros({B * C, 256}, v.options()).scatter_add_(1, v, torch::ones_like(v));
  auto bins = torch::arange(256, v.options()).view({1, 256});
  auto last = std::get<0>(((hist > 0).to(torch::kInt64) * bins).max(1, /*keepdim=*/true));  // last non-empty bin
  auto step = torch::div(hist.sum(1, true) - hist.gather(1, last), 255, "floor");          // (N,1)
  auto safe = step.clamp_min(1);
  auto lut = torch::div(hist.cumsum(1) + torch::div(step, 2, "floor"), safe, "floor");
  lut = torch::cat({torch::zeros({B * C, 1}, lut.options()), lut.narrow(1, 0, 255)}, 1).clamp_(0, 255);
  auto out = torch::where(step == 0, v, lut.gather(1, v));
  return out.to(x.dtype()).view({B, C, H, W});
}

}  // namespace

const char* auto_op_name(AutoOp op) {
  static const char* names[] = {"Identity",   "ShearX",   "ShearY",    "TranslateX", "TranslateY",
                                "Rotate",     "Brightness", "Color",   "Contrast",   "Sharpness",
                                "Posterize",  "Solarize", "AutoContrast", "Equalize"};
  const int k = static_cast<int>(op);
  return k >= 0 && k < static_cast<int>(AutoOp::count) ? names[k] : "?";
}

double auto_augment_magnitude(const std::string& policy, AutoOp op, int bin, int num_bins, int64_t H, int64_t W,
                              bool* signed_op) {
  TRAINER_CHECK(policy == "rand" || policy == "trivial", "auto augment policy '", policy,
                "': expected rand or trivial");
  TRAINER_CHECK(num_bins >= 2 && bin >= 0 && bin < num_bins, "auto augment magnitude bin ", bin, " outside 0..",
                num_bins - 1);
  const bool wide = policy == "trivial";
  bool sign = true;
  double m = 0.0;
  switch (op) {
    case AutoOp::shear_x:
    case AutoOp::shear_y: m = linspace_at(0.f, wide ? 0.99f : 0.3f, num_bins, bin); break;
    case AutoOp::translate_x:
      m = linspace_at(0.f, wide ? 32.f : static_cast<float>(150.0 / 331.0 * static_cast<double>(W)), num_bins, bin);
      break;
    case AutoOp::translate_y:
      m = linspace_at(0.f, wide ? 32.f : static_cast<float>(150.0 / 331.0 * static_cast<double>(H)), num_bins, bin);
      break;
    case AutoOp::rotate: m = linspace_at(0.f, wide ? 135.f : 30.f, num_bins, bin); break;
    case AutoOp::brightness:
    case AutoOp::color:
    case AutoOp::contrast:
    case AutoOp::sharpness: m = linspace_at(0.f, wide ? 0.99f : 0.9f, num_bins, bin); break;
    case AutoOp::posterize: {
      const float q = static_cast<float>(bin) / (static_cast<float>(num_bins - 1) / (wide ? 6.f : 4.f));
      m = 8.0 - std::nearbyint(q);  // torch.round: half to even
      sign = false;
      break;
    }
    case AutoOp::solarize:
      m = linspace_at(255.f, 0.f, num_bins, bin);
      sign = false;
      break;
    default: sign = false; break;  // identity, autocontrast, equalize: no magnitude
  }
  if (signed_op) *signed_op = sign;
  return m;
}

AutoAugmentDraw draw_auto_augment(const AutoAugmentOptions& o, uint64_t seed, int64_t epoch, int64_t index,
                                  int64_t H, int64_t W) {
  AutoAugmentDraw d;
  if (!o.on()) return d;
  TRAINER_CHECK(o.num_ops >= 1 && o.num_ops <= 4, "RandAugment takes 1 to 4 ops, got ", o.num_ops);
  SampleRng rng(mix_seed(seed, kStream), static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
  d.n = o.policy == "trivial" ? 1 : o.num_ops;
  const int ops = static_cast<int>(AutoOp::count);
  for (int k = 0; k < d.n; ++k) {
    const auto op = static_cast<AutoOp>(rng.randint(0, ops - 1));
    const int bin = o.policy == "trivial" ? static_cast<int>(rng.randint(0, o.num_bins - 1)) : o.magnitude;
    bool sign = false;
    double m = auto_augment_magnitude(o.policy, op, bin, o.num_bins, H, W, &sign);
    if (sign && rng.randint(0, 1) == 1) m = -m;
    d.op[k] = op;
    d.magnitude[k] = m;
  }
  return d;
}

torch::Tensor apply_auto_op(const torch::Tensor& x, AutoOp op, const std::vector<double>& mag) {
  torch::NoGradGuard ng;
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  TRAINER_CHECK(static_cast<int64_t>(mag.size()) == B, "apply_auto_op: one magnitude per sample");
  TRAINER_CHECK(C == 1 || C == 3, "auto augment needs 1 or 3 channels, got ", C);
  switch (op) {
    case AutoOp::identity: return x;
    case AutoOp::shear_x:
    case AutoOp::shear_y:
    case AutoOp::translate_x:
    case AutoOp::translate_y:
    case AutoOp::rotate: {
      std::vector<std::array<double, 6>> mats;
      for (double m : mag) {
        const double deg = std::atan(m) * 180.0 / kPi;
        const double tr = std::trunc(m);  // int(magnitude)
        switch (op) {  // shears about the top-left corner (centre [0, 0]), the rest about the image centre
          case AutoOp::shear_x: mats.push_back(inverse_affine(-W * 0.5, -H * 0.5, 0, 0, 0, deg, 0)); break;
          case AutoOp::shear_y: mats.push_back(inverse_affine(-W * 0.5, -H * 0.5, 0, 0, 0, 0, deg)); break;
          case AutoOp::translate_x: mats.push_back(inverse_affine(0, 0, 0, tr, 0, 0, 0)); break;
          case AutoOp::translate_y: mats.push_back(inverse_affine(0, 0, 0, 0, tr, 0, 0)); break;
          default: mats.push_back(inverse_affine(0, 0, -m, 0, 0, 0, 0)); break;  // F.rotate passes -angle
        }
      }
      return warp(x, mats);
    }
    case AutoOp::brightness: return blend(x, torch::zeros_like(x), mag);
    case AutoOp::color:
      if (C == 1) return x;
      return blend(x, grayscale_u8(x), mag);
    case AutoOp::contrast: {
      auto g = C == 3 ? grayscale_u8(x) : x;
      return blend(x, g.mean({1, 2, 3}, /*keepdim=*/true), mag);
    }
    case AutoOp::sharpness: {
      if (H <= 2 || W <= 2) return x;
      auto k = torch::ones({3, 3}, x.options());
      k[1][1] = 5.0;
      k = (k / k.sum()).expand({C, 1, 3, 3});
      auto blurred = torch::conv2d(x, k, torch::Tensor(), torch::IntArrayRef{1}, torch::IntArrayRef{0}, torch::IntArrayRef{1}, C).round_();
      auto degenerate = x.clone();
      degenerate.narrow(2, 1, H - 2).narrow(3, 1, W - 2).copy_(blurred);
      return blend(x, degenerate, mag);
    }
    case AutoOp::posterize: {  // img & -(2^(8-bits)) on integers: floor to a multiple of 2^(8-bits)
      std::vector<double> q;
      for (double m : mag) q.push_back(std::ldexp(1.0, 8 - static_cast<int>(m)));
      auto s = per_sample(q, x);
      return torch::floor(x / s) * s;
    }
    case AutoOp::solarize: return torch::where(x >= per_sample(mag, x), 255.0 - x, x);
    case AutoOp::auto_contrast: {
      auto lo = x.amin({2, 3}, /*keepdim=*/true), hi = x.amax({2, 3}, /*keepdim=*/true);
      auto scale = (hi - lo).reciprocal() * 255.0;  // ATen's scalar / tensor
      auto flat = torch::isfinite(scale).logical_not();
      lo = lo.masked_fill(flat, 0.0);
      scale = scale.masked_fill(flat, 1.0);
      return to_u8((x - lo) * scale);
    }
    case AutoOp::equalize: return equalize(x);
    default: TRAINER_FAIL("unknown auto augment op ", static_cast<int>(op));
  }
}

void auto_augment_(torch::Tensor& x, const std::vector<AutoAugmentDraw>& draws) {
  torch::NoGradGuard ng;
  TRAINER_CHECK(static_cast<int64_t>(draws.size()) == x.size(0), "auto_augment_: one draw per sample");
  int rounds = 0;
  for (const auto& d : draws) rounds = std::max(rounds, d.n);
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < static_cast<int>(AutoOp::count); ++k) {
      const auto op = static_cast<AutoOp>(k);
      if (op == AutoOp::identity) continue;
      std::vector<int64_t> idx;
      std::vector<double> mag;
      for (size_t i = 0; i < draws.size(); ++i)
        if (r < draws[i].n && draws[i].op[r] == op) {
          idx.push_back(static_cast<int64_t>(i));
          mag.push_back(draws[i].magnitude[r]);
        }
      if (idx.empty()) continue;
      auto where = upload(torch::tensor(idx, torch::kInt64), x.device());
      x.index_copy_(0, where, apply_auto_op(x.index_select(0, where), op, mag));
    }
  }
}

}  // namespace trainer
