#include "data/augment.h"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#ifdef TRAINER_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include <cmath>

#include "core/check.h"
#include "core/random.h"
#include "data/device_upload.h"

namespace trainer {
namespace {

constexpr uint64_t kStream = 0xA06D'E7A5'0C01'0123ull;  // separates these draws from the crop/flip draws

torch::Tensor gray(const torch::Tensor& x) {  // (B,3,H,W) -> (B,1,H,W), ITU-R 601-2 as torchvision
  auto c = x.unbind(1);
  return (0.2989 * c[0] + 0.587 * c[1] + 0.114 * c[2]).unsqueeze(1);
}

torch::Tensor blend(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& f) {
  return (f * a + (1.0 - f) * b).clamp_(0.0, 1.0);
}

torch::Tensor rgb_to_hsv(const torch::Tensor& img) {
  auto c = img.unbind(1);
  const auto& r = c[0], &g = c[1], &b = c[2];
  auto maxc = std::get<0>(img.max(1)), minc = std::get<0>(img.min(1));
  auto eqc = maxc == minc;
  auto cr = maxc - minc;
  auto ones = torch::ones_like(maxc);
  auto s = cr / torch::where(eqc, ones, maxc);
  auto div = torch::where(eqc, ones, cr);
  auto rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
  auto hr = (maxc == r).to(img.dtype()) * (bc - gc);
  auto hg = ((maxc == g) & (maxc != r)).to(img.dtype()) * (2.0 + rc - bc);
  auto hb = ((maxc != g) & (maxc != r)).to(img.dtype()) * (4.0 + gc - rc);
  auto h = torch::fmod((hr + hg + hb) / 6.0 + 1.0, 1.0);
  return torch::stack({h, s, maxc}, 1);
}

torch::Tensor hsv_to_rgb(const torch::Tensor& img) {
  auto c = img.unbind(1);
  const auto& h = c[0], &s = c[1], &v = c[2];
  auto i = torch::floor(h * 6.0);
  auto f = h * 6.0 - i;
  auto ii = i.to(torch::kInt32).remainder(6);
  auto p = (v * (1.0 - s)).clamp(0.0, 1.0);
  auto q = (v * (1.0 - s * f)).clamp(0.0, 1.0);
  auto t = (v * (1.0 - s * (1.0 - f))).clamp(0.0, 1.0);
  auto mask = (ii.unsqueeze(1) == torch::arange(6, ii.options()).view({1, 6, 1, 1})).to(img.dtype());  // (B,6,H,W)
  auto a1 = torch::stack({v, q, p, p, t, v}, 1), a2 = torch::stack({t, v, v, q, p, p}, 1),
       a3 = torch::stack({p, p, t, v, v, q}, 1);
  return torch::stack({(mask * a1).sum(1), (mask * a2).sum(1), (mask * a3).sum(1)}, 1);
}

torch::Tensor apply_op(int op, const torch::Tensor& x, const torch::Tensor& f) {  // f: (B,1,1,1)
  switch (op) {
    case 0: return blend(x, torch::zeros_like(x), f);
    case 1: return blend(x, gray(x).mean({1, 2, 3}, /*keepdim=*/true), f);
    case 2: return blend(x, gray(x), f);
    default: {
      auto hsv = rgb_to_hsv(x);
      auto parts = hsv.unbind(1);
      auto h = torch::remainder(parts[0] + f.squeeze(1), 1.0);
      return hsv_to_rgb(torch::stack({h, parts[1], parts[2]}, 1));
    }
  }
}

}  // namespace

bool AugmentOptions::jitter_on() const {
  for (double v : jitter)
    if (v > 0) return true;
  return false;
}

SampleAugment draw_augment(const AugmentOptions& o, uint64_t seed, int64_t epoch, int64_t index, int64_t H, int64_t W) {
  SampleAugment a;
  SampleRng rng(mix_seed(seed, kStream), static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
  if (o.jitter_on()) {
    TRAINER_CHECK(o.jitter.size() == 4, "colour jitter takes 4 values (brightness, contrast, saturation, hue)");
    for (int k = 0; k < 3; ++k)
      a.factor[k] = o.jitter[k] > 0 ? static_cast<float>(rng.uniform(std::max(0.0, 1.0 - o.jitter[k]), 1.0 + o.jitter[k]))
                                    : 1.f;
    a.factor[3] = o.jitter[3] > 0 ? static_cast<float>(rng.uniform(-o.jitter[3], o.jitter[3])) : 0.f;
    for (int k = 3; k > 0; --k) std::swap(a.order[k], a.order[rng.randint(0, k)]);  // Fisher-Yates
  }
  if (o.erase_on() && rng.bernoulli(o.erase_prob)) {
    const double area = static_cast<double>(H * W);
    const double lr0 = std::log(o.erase_ratio[0]), lr1 = std::log(o.erase_ratio[1]);
    for (int attempt = 0; attempt < 10; ++attempt) {  // torchvision's RandomErasing.get_params
      const double target = area * rng.uniform(o.erase_scale[0], o.erase_scale[1]);
      const double aspect = std::exp(rng.uniform(lr0, lr1));
      const int64_t h = std::llround(std::sqrt(target * aspect)), w = std::llround(std::sqrt(target / aspect));
      if (!(h < H && w < W) || h <= 0 || w <= 0) continue;
      a.erase[0] = rng.randint(0, H - h);
      a.erase[1] = rng.randint(0, W - w);
      a.erase[2] = h;
      a.erase[3] = w;
      break;
    }
  }
  return a;
}

void color_jitter_(torch::Tensor& x, const torch::Tensor& factors, const torch::Tensor& order,
                   const std::array<bool, 4>& ops) {
  torch::NoGradGuard ng;
  const int64_t B = x.size(0);
  TRAINER_CHECK(order.device().is_cpu() && order.dim() == 2 && order.size(0) == B && order.size(1) == 4,
                "color_jitter_: order must be (B, 4) on the CPU");
  // per pass, the samples grouped by the operation they take then: one gather, one operation and one scatter per
  // group (instead of every operation on the whole batch, then a select); one upload of the groups for the batch
  const torch::Tensor ord = order.to(torch::kInt64).contiguous();
  const int64_t* o = ord.data_ptr<int64_t>();
  std::vector<int64_t> grouped(static_cast<size_t>(4 * B));
  int64_t begin[4][5] = {};  // pass, operation: the group's first position in `grouped` (relative to the pass)
  for (int pass = 0; pass < 4; ++pass) {
    int64_t count[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < B; ++i) {
      const int64_t op = o[i * 4 + pass];
      TRAINER_CHECK(op >= 0 && op < 4, "color_jitter_: operation ", op, " of sample ", i, " is not 0..3");
      ++count[op];
    }
    for (int op = 0; op < 4; ++op) begin[pass][op + 1] = begin[pass][op] + count[op];
    int64_t at[4] = {begin[pass][0], begin[pass][1], begin[pass][2], begin[pass][3]};
    for (int64_t i = 0; i < B; ++i) grouped[static_cast<size_t>(pass * B + at[o[i * 4 + pass]]++)] = i;
  }
  // (used before `grouped` goes away: on the CPU as is; to a device through a pinned copy)
  const torch::Tensor groups = upload(torch::from_blob(grouped.data(), {4 * B}, torch::kInt64), x.device());
  const torch::Tensor f = factors.to(x.dtype()).view({B, 4, 1, 1});
  for (int pass = 0; pass < 4; ++pass)
    for (int op = 0; op < 4; ++op) {
      const int64_t n = begin[pass][op + 1] - begin[pass][op];
      if (!ops[static_cast<size_t>(op)] || n == 0) continue;  // off in the config: its factor is the identity
      if (n == B) {  // the whole batch takes this operation now
        x.copy_(apply_op(op, x, f.narrow(1, op, 1)));
        continue;
      }
      const torch::Tensor idx = groups.narrow(0, pass * B + begin[pass][op], n);
      x.index_copy_(0, idx, apply_op(op, x.index_select(0, idx), f.index_select(0, idx).narrow(1, op, 1)));
    }
}

namespace {
// A generator of its own for x's device, seeded: the noise depends on the seed alone, never on what other threads
// (the training step's dropout, another loader thread) drew from the global generators meanwhile.
at::Generator noise_generator(torch::Device device, uint64_t seed) {
#ifdef TRAINER_WITH_CUDA
  if (device.is_cuda()) {
    at::Generator g = at::cuda::detail::createCUDAGenerator(device.index());
    g.set_current_seed(seed);
    return g;
  }
#endif
  return at::detail::createCPUGenerator(seed);
}
}  // namespace

void erase_(torch::Tensor& x, const torch::Tensor& boxes, bool pixel, uint64_t noise_seed) {
  torch::NoGradGuard ng;
  const int64_t B = x.size(0), H = x.size(2), W = x.size(3);
  auto b = boxes.view({B, 4, 1, 1});
  auto ys = torch::arange(H, boxes.options()).view({1, H, 1}), xs = torch::arange(W, boxes.options()).view({1, 1, W});
  auto y0 = b.select(1, 0), x0 = b.select(1, 1), h = b.select(1, 2), w = b.select(1, 3);  // (B,1,1)
  auto mask = ((ys >= y0) & (ys < y0 + h) & (xs >= x0) & (xs < x0 + w)).unsqueeze(1);  // (B,1,H,W)
  if (pixel) {
    at::Generator gen = noise_generator(x.device(), noise_seed);
    x.copy_(torch::where(mask, at::randn(x.sizes(), gen, x.options()), x));
  }
  else x.masked_fill_(mask, 0.0);
}

BatchAugmenter::Draws BatchAugmenter::draw(const std::vector<int64_t>& indices, int64_t epoch, int64_t H, int64_t W,
                                           torch::Device device) const {
  const int64_t B = static_cast<int64_t>(indices.size());
  auto host = torch::empty({B, 12}, torch::kFloat64);
  auto* p = host.data_ptr<double>();
  for (int64_t i = 0; i < B; ++i) {
    const SampleAugment a = draw_augment(opt_, seed_, epoch, indices[static_cast<size_t>(i)], H, W);
    for (int k = 0; k < 4; ++k) {
      p[i * 12 + k] = a.factor[k];
      p[i * 12 + 4 + k] = static_cast<double>(a.order[k]);
      p[i * 12 + 8 + k] = static_cast<double>(a.erase[k]);
    }
  }
  auto dev = upload(host, device);
  Draws d;
  d.noise_seed = mix_seed(mix_seed(seed_ ^ 0x6e6f697365ull, static_cast<uint64_t>(epoch) + 1),
                          B > 0 ? static_cast<uint64_t>(indices[0]) + 1 : 0);  // the batch's first sample
  d.factors = dev.narrow(1, 0, 4).to(torch::kFloat32);
  d.order = host.narrow(1, 4, 4).to(torch::kInt64);  // on the host: it groups the samples (color_jitter_)
  d.boxes = dev.narrow(1, 8, 4).to(torch::kInt64);
  return d;
}

void BatchAugmenter::jitter_255_(torch::Tensor& x, const Draws& d) const {
  if (!opt_.jitter_on()) return;
  x.mul_(1.0 / 255.0);
  std::array<bool, 4> ops{};
  for (size_t k = 0; k < 4; ++k) ops[k] = opt_.jitter[k] > 0;
  color_jitter_(x, d.factors, d.order, ops);
  x.mul_(255.0);
}

void BatchAugmenter::auto_augment_255_(torch::Tensor& x, const std::vector<int64_t>& indices, int64_t epoch) const {
  if (!opt_.auto_augment.on()) return;
  std::vector<AutoAugmentDraw> draws;
  draws.reserve(indices.size());
  for (int64_t i : indices) draws.push_back(draw_auto_augment(opt_.auto_augment, seed_, epoch, i, x.size(2), x.size(3)));
  x.round_();
  auto_augment_(x, draws);
}

void BatchAugmenter::augment_and_normalize_(torch::Tensor& x, const std::vector<int64_t>& indices, int64_t epoch, bool train,
                                const torch::Tensor& mean255, const torch::Tensor& inv_std255) const {
  const bool augment = train && enabled();
  Draws d;
  if (augment) {
    d = draw(indices, epoch, x.size(2), x.size(3), x.device());
    auto_augment_255_(x, indices, epoch);
    jitter_255_(x, d);
  }
  x.sub_(mean255).mul_(inv_std255);
  if (augment) erase_(x, d);
}

void BatchAugmenter::erase_(torch::Tensor& x, const Draws& d) const {
  if (opt_.erase_on()) trainer::erase_(x, d.boxes, opt_.erase_pixel, d.noise_seed);
}

}  // namespace trainer
