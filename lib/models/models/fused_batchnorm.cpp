#include "models/fused_batchnorm.h"

#include <torch/torch.h>

#include "core/check.h"

#ifdef TRAINER_WITH_KERNELS
#include "kernels/batchnorm_nhwc.h"
#include "models/internal/kernel_glue.h"
#endif

namespace trainer {

#ifdef TRAINER_WITH_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using glue::stream_of;
kernels::HalfType dtype_of(const torch::Tensor& t) { return glue::half_type_of(t); }
void check(cudaError_t e, const char* what) { glue::check_launch(e, "fused batch norm", what); }

float* f32(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

double* f64(const torch::Tensor& t) { return t.data_ptr<double>(); }

const uint8_t* u8(const torch::Tensor& t) { return t.defined() ? t.data_ptr<uint8_t>() : nullptr; }

// the all-reduce of SyncBatchNorm travels through autograd's saved data as an address (the module owns it)
const AllReduceFn* all_reduce_of(int64_t address) { return reinterpret_cast<const AllReduceFn*>(address); }

struct FusedBatchNorm : public torch::autograd::Function<FusedBatchNorm> {
  // z: the residual, or an empty tensor for none; sync: the address of an AllReduceFn (SyncBatchNorm) or 0; fork:
  // y is returned twice (see fused_batchnorm_forked)
  static variable_list forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor z, torch::Tensor weight,
                               torch::Tensor bias, torch::Tensor running_mean, torch::Tensor running_var,
                               double momentum, double eps, bool relu, int64_t sync, bool fork) {
    const int64_t C = x.size(1), M = x.numel() / C;
    const auto f = x.options().dtype(torch::kFloat32);
    torch::Tensor y = torch::empty_like(x, torch::MemoryFormat::ChannelsLast);
    torch::Tensor mean = torch::empty({C}, f), invstd = torch::empty({C}, f);
    torch::Tensor scale = torch::empty({C}, f), shift = torch::empty({C}, f);
    torch::Tensor ws = torch::empty({kernels::bn_workspace_floats(M, C)}, f);
    torch::Tensor count;  // SyncBatchNorm: the values per channel over all ranks (double, on the device)
    const cudaStream_t s = stream_of(x);
    const float e = static_cast<float>(eps), m = static_cast<float>(momentum);
    if (sync) {  // shifted by the running mean, which every rank holds alike
      torch::Tensor sums = torch::empty({2 * C + 1}, x.options().dtype(torch::kFloat64));
      check(kernels::bn_forward_sums(x.data_ptr(), dtype_of(x), M, C, f32(running_mean), f64(sums), f32(ws), s),
            "local sums");
      (*all_reduce_of(sync))(sums);
      check(kernels::bn_stats_from_sums(f64(sums), f32(running_mean), C, f32(weight), f32(bias), e, m,
                                        f32(running_mean), f32(running_var), f32(mean), f32(invstd), f32(scale),
                                        f32(shift), s),
            "statistics over ranks");
      count = sums.narrow(0, 2 * C, 1);
    } else {
      check(kernels::bn_forward_stats(x.data_ptr(), dtype_of(x), M, C, f32(weight), f32(bias), e, m, f32(running_mean),
                                      f32(running_var), f32(mean), f32(invstd), f32(scale), f32(shift), f32(ws), s),
            "statistics");
    }
    const bool has_z = z.numel() > 0;
    const void* zp = has_z ? z.data_ptr() : nullptr;
    // the ReLU's mask where the residual was added: as bits where the tensors fit them, else y itself (without the
    // residual the backward recomputes it from x with scale and shift)
    torch::Tensor bits, y_for_mask;
    if (relu && has_z && kernels::bn_relu_bits_fit(C, x.data_ptr(), zp, y.data_ptr()))
      bits = torch::empty({kernels::bn_relu_bits_bytes(M, C)}, x.options().dtype(torch::kUInt8));
    else if (relu && has_z)
      y_for_mask = y;
    check(kernels::bn_apply(x.data_ptr(), zp, y.data_ptr(), dtype_of(x), M, C, f32(scale), f32(shift), relu,
                            bits.defined() ? bits.data_ptr<uint8_t>() : nullptr, s),
          "apply");
    ctx->save_for_backward({x, y_for_mask, bits, weight, mean, invstd, scale, shift, count});
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["has_z"] = has_z;
    ctx->saved_data["sync"] = sync;
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined, not a tensor of zeros
    if (!fork) return {y};
    // the second use: the same storage, not a view of y (autograd gives each output its own gradient)
    torch::Tensor y2 = torch::empty({0}, y.options()).set_(y);
    return {y, y2};
  }

  // dy and dy2: the outputs' gradients in x's dtype and layout (either may be undefined; if both are, y was unused);
  // dy2 stays separate only where the kernels read it (they sum it in their reduction)
  static std::pair<torch::Tensor, torch::Tensor> output_grads(const variable_list& grads, const torch::Tensor& x,
                                                              bool kernels_read_dy2) {
    auto prepare = [&](const torch::Tensor& g) {
      return g.defined() ? g.to(x.scalar_type()).contiguous(torch::MemoryFormat::ChannelsLast) : g;
    };
    torch::Tensor dy = prepare(grads[0]), dy2 = grads.size() > 1 ? prepare(grads[1]) : torch::Tensor();
    if (!dy.defined()) return {dy2, torch::Tensor()};
    if (dy2.defined() && !kernels_read_dy2) return {dy + dy2, torch::Tensor()};
    return {dy, dy2};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &y = saved[1], &bits = saved[2], &weight = saved[3], &mean = saved[4],
                        &invstd = saved[5], &scale = saved[6], &shift = saved[7], &count = saved[8];
    const bool relu = ctx->saved_data["relu"].toBool(), has_z = ctx->saved_data["has_z"].toBool();
    const int64_t sync = ctx->saved_data["sync"].toInt();
    const auto [dy, dy2] = output_grads(grads, x, relu && has_z);
    if (!dy.defined()) return variable_list(11);
    const void* dy2p = dy2.defined() ? dy2.data_ptr() : nullptr;
    const int64_t C = x.size(1), M = x.numel() / C;
    const auto f = x.options().dtype(torch::kFloat32);
    torch::Tensor dx = torch::empty_like(x, torch::MemoryFormat::ChannelsLast);
    torch::Tensor dz = has_z ? torch::empty_like(x, torch::MemoryFormat::ChannelsLast) : torch::Tensor();
    torch::Tensor dweight = torch::empty({C}, f), dbias = torch::empty({C}, f);
    torch::Tensor ws = torch::empty({kernels::bn_workspace_floats(M, C)}, f);
    const void* yp = y.defined() ? y.data_ptr() : nullptr;
    void* dzp = has_z ? dz.data_ptr() : nullptr;
    const cudaStream_t s = stream_of(x);
    if (sync) {  // dx from the gradient sums over ranks; dweight, dbias this rank's (DDP sums them)
      torch::Tensor sums = torch::empty({2 * C}, x.options().dtype(torch::kFloat64));
      check(kernels::bn_backward_sums(dy.data_ptr(), dy2p, yp, u8(bits), x.data_ptr(), dzp, dtype_of(x), M, C,
                                      f32(mean), f32(invstd), f32(scale), f32(shift), relu, f32(dweight), f32(dbias),
                                      f64(sums), f32(ws), s),
            "local gradient sums");
      (*all_reduce_of(sync))(sums);
      check(kernels::bn_backward_from_sums(dy.data_ptr(), yp, u8(bits), x.data_ptr(), dx.data_ptr(), dzp, dtype_of(x),
                                           M, C, f32(weight), f32(mean), f32(invstd), f32(scale), f32(shift), relu,
                                           f64(sums), f64(count), f32(ws), s),
            "backward over ranks");
    } else {
      check(kernels::bn_backward(dy.data_ptr(), dy2p, yp, u8(bits), x.data_ptr(), dx.data_ptr(), dzp, dtype_of(x), M,
                                 C, f32(weight), f32(mean), f32(invstd), f32(scale), f32(shift), relu, f32(dweight),
                                 f32(dbias), f32(ws), s),
            "backward");
    }
    return {dx,       dz, dweight, dbias, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace
#endif

bool fused_batchnorm_built() {
#ifdef TRAINER_WITH_KERNELS
  return true;
#else
  return false;
#endif
}

FusedNorm fused_norm_from(const std::string& v) {
  if (v == "off") return FusedNorm::off;
  if (v == "on") return FusedNorm::on;
  TRAINER_CHECK(v == "auto", "model.fused_norm: expected auto, on or off, got '", v, "'");
  return FusedNorm::faster;
}

bool fused_batchnorm_applies(const torch::Tensor& x, bool training, FusedNorm policy) {
  if (policy == FusedNorm::off || !fused_batchnorm_built() || !x.defined() || !x.is_cuda() || x.dim() != 4)
    return false;
  if (x.scalar_type() != torch::kBFloat16 && x.scalar_type() != torch::kHalf) return false;
  if (!x.is_contiguous(torch::MemoryFormat::ChannelsLast) || x.numel() == 0) return false;
  if (training) return x.numel() / x.size(1) > 1;  // ATen's error for one value per channel stays ATen's
  return !(torch::GradMode::is_enabled() && x.requires_grad());
}

std::pair<torch::Tensor, torch::Tensor> fused_batchnorm_forked(const torch::Tensor& x, const torch::Tensor& z,
                                                               const torch::Tensor& weight, const torch::Tensor& bias,
                                                               torch::Tensor& running_mean,
                                                               torch::Tensor& running_var, double momentum,
                                                               double eps, bool training, bool relu,
                                                               const AllReduceFn* all_reduce, bool fork) {
#ifdef TRAINER_WITH_KERNELS
  TRAINER_CHECK(weight.scalar_type() == torch::kFloat32 && running_mean.scalar_type() == torch::kFloat32,
                "fused batch norm: parameters and running statistics must be float32");
  TRAINER_CHECK(!z.defined() || (z.sizes() == x.sizes() && z.scalar_type() == x.scalar_type() &&
                                 z.is_contiguous(torch::MemoryFormat::ChannelsLast)),
                "fused batch norm: the residual must have the input's shape, dtype and channels_last layout");
  if (training) {  // autograd functions take defined tensors only: no residual is an empty one
    const variable_list y =
        FusedBatchNorm::apply(x, z.defined() ? z : x.new_empty({0}), weight, bias, running_mean, running_var, momentum,
                              eps, relu, static_cast<int64_t>(reinterpret_cast<intptr_t>(all_reduce)), fork);
    return {y[0], fork ? y[1] : y[0]};
  }
  const int64_t C = x.size(1), M = x.numel() / C;
  const auto f = x.options().dtype(torch::kFloat32);
  torch::Tensor scale = torch::empty({C}, f), shift = torch::empty({C}, f);
  torch::Tensor y = torch::empty_like(x, torch::MemoryFormat::ChannelsLast);
  const cudaStream_t s = stream_of(x);
  check(kernels::bn_eval_scale_shift(f32(weight), f32(bias), f32(running_mean), f32(running_var),
                                     static_cast<float>(eps), C, f32(scale), f32(shift), s),
        "eval scale");
  check(kernels::bn_apply(x.data_ptr(), z.defined() ? z.data_ptr() : nullptr, y.data_ptr(), dtype_of(x), M, C,
                          f32(scale), f32(shift), relu, nullptr, s),
        "eval apply");
  return {y, y};
#else
  TRAINER_FAIL("fused batch norm: this build has no CUDA kernels of its own (no nvcc)");
#endif
}

#ifdef TRAINER_WITH_KERNELS
namespace {
kernels::BnTypes types_of(const torch::Tensor& x, torch::ScalarType rest) {
  return {dtype_of(x), rest == torch::kHalf ? kernels::HalfType::fp16 : kernels::HalfType::bf16};
}
}  // namespace
#endif

torch::Tensor fused_batchnorm_train_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                            const torch::Tensor& bias, torch::Tensor& running_mean,
                                            torch::Tensor& running_var, double momentum, double eps, bool relu,
                                            torch::ScalarType out_dtype, FusedBnSaved& saved) {
#ifdef TRAINER_WITH_KERNELS
  TRAINER_CHECK(x.is_cuda() && x.dim() == 4 && x.is_contiguous(torch::MemoryFormat::ChannelsLast),
                "fused batch norm: expected a 4-D channels_last CUDA input, got sizes ", x.sizes());
  TRAINER_CHECK((out_dtype == torch::kBFloat16 || out_dtype == torch::kHalf) &&
                    (x.scalar_type() == out_dtype || x.scalar_type() == torch::kHalf),
                "fused batch norm: expected a bf16 or fp16 output from an input of its type or fp16, got ",
                x.scalar_type(), " to ", out_dtype);
  TRAINER_CHECK(weight.scalar_type() == torch::kFloat32 && running_mean.scalar_type() == torch::kFloat32,
                "fused batch norm: parameters and running statistics must be float32");
  const int64_t C = x.size(1), M = x.numel() / C;
  TRAINER_CHECK(M > 1, "fused batch norm: expected more than 1 value per channel when training, got input size ",
                x.sizes());
  const auto f = x.options().dtype(torch::kFloat32);
  saved = {x, torch::empty({C}, f), torch::empty({C}, f), torch::empty({C}, f), torch::empty({C}, f), relu};
  torch::Tensor ws = torch::empty({kernels::bn_workspace_floats(M, C)}, f);
  const cudaStream_t s = stream_of(x);
  check(kernels::bn_forward_stats(x.data_ptr(), dtype_of(x), M, C, f32(weight), f32(bias), static_cast<float>(eps),
                                  static_cast<float>(momentum), f32(running_mean), f32(running_var), f32(saved.mean),
                                  f32(saved.invstd), f32(saved.scale), f32(saved.shift), f32(ws), s),
        "statistics");
  torch::Tensor y =
      torch::empty(x.sizes(), x.options().dtype(out_dtype).memory_format(torch::MemoryFormat::ChannelsLast));
  check(kernels::bn_apply(x.data_ptr(), nullptr, y.data_ptr(), types_of(x, out_dtype), M, C, f32(saved.scale),
                          f32(saved.shift), relu, nullptr, s),
        "apply");
  return y;
#else
  (void)x, (void)weight, (void)bias, (void)running_mean, (void)running_var, (void)momentum, (void)eps, (void)relu,
      (void)out_dtype, (void)saved;
  TRAINER_FAIL("fused batch norm: this build has no CUDA kernels of its own (no nvcc)");
#endif
}

FusedBnGrads fused_batchnorm_train_backward(const FusedBnSaved& sv, const torch::Tensor& weight,
                                            const torch::Tensor& dy_in) {
#ifdef TRAINER_WITH_KERNELS
  const torch::Tensor dy = dy_in.contiguous(torch::MemoryFormat::ChannelsLast);
  TRAINER_CHECK(dy.sizes() == sv.x.sizes(), "fused batch norm backward: the gradient's sizes ", dy.sizes(),
                " differ from the input's ", sv.x.sizes());
  const int64_t C = sv.x.size(1), M = sv.x.numel() / C;
  const auto f = sv.x.options().dtype(torch::kFloat32);
  FusedBnGrads g{torch::empty_like(dy, torch::MemoryFormat::ChannelsLast), torch::empty({C}, f),
                 torch::empty({C}, f)};
  torch::Tensor ws = torch::empty({kernels::bn_workspace_floats(M, C)}, f);
  check(kernels::bn_backward(dy.data_ptr(), nullptr, nullptr, nullptr, sv.x.data_ptr(), g.dx.data_ptr(), nullptr,
                             types_of(sv.x, dy.scalar_type()), M, C, f32(weight), f32(sv.mean), f32(sv.invstd),
                             f32(sv.scale), f32(sv.shift), sv.relu, f32(g.dweight), f32(g.dbias), f32(ws),
                             stream_of(dy)),
        "backward");
  return g;
#else
  (void)sv, (void)weight, (void)dy_in;
  TRAINER_FAIL("fused batch norm: this build has no CUDA kernels of its own (no nvcc)");
#endif
}

torch::Tensor fused_batchnorm(const torch::Tensor& x, const torch::Tensor& z, const torch::Tensor& weight,
                              const torch::Tensor& bias, torch::Tensor& running_mean, torch::Tensor& running_var,
                              double momentum, double eps, bool training, bool relu, const AllReduceFn* all_reduce) {
  return fused_batchnorm_forked(x, z, weight, bias, running_mean, running_var, momentum, eps, training, relu,
                                all_reduce, /*fork=*/false)
      .first;
}

}  // namespace trainer
