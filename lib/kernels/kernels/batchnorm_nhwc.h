// Batch norm over NHWC activations (a channels_last NCHW tensor is M = N*H*W rows of C channels), bf16 or fp16
// values with fp32 parameters and statistics, fused with the residual add and ReLU that follow it in ResNet:
//   training forward: bn_forward_stats (per-channel mean and variance, running statistics), then bn_apply
//   eval forward:     bn_eval_scale_shift, then bn_apply
//   training backward: bn_backward (one reduction pass, one elementwise pass)
//   SyncBatchNorm: the same passes split around all-reduces of per-channel sums (bn_forward_sums, bn_backward_sums)
// Plain CUDA behind a C++ interface (no torch headers); models/fused_batchnorm.cpp is the ATen-facing layer. Each
// launcher returns the launch error (cudaSuccess when the kernels were queued on `stream`).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/half_type.h"

namespace trainer::kernels {

// The activations' element types: x's, and the rest's (z, y and the gradients). One type, or an fp16 x under bf16
// for a norm whose input has an fp16 producer under bf16 autocast (ResNet's fp16 stem: models/stem_conv.h); the
// functions taking BnTypes answer cudaErrorInvalidValue for other pairs.
struct BnTypes {
  HalfType x, rest;
  BnTypes(HalfType all) : x(all), rest(all) {}  // NOLINT(google-explicit-constructor): one type, as most callers
  BnTypes(HalfType x_type, HalfType rest_type) : x(x_type), rest(rest_type) {}
};

// fp32 workspace the reductions need for M rows of C channels on the current device.
int64_t bn_workspace_floats(int64_t M, int64_t C);

// Per-channel batch mean and biased variance of x (M x C) in fp32 (shifted sums, merged in double), then
//   save_mean, save_invstd = 1 / sqrt(var + eps), scale = weight * invstd, shift = bias - mean * scale,
//   running_mean, running_var (if not null) = (1 - momentum) * running + momentum * (mean, var * M / (M - 1)).
cudaError_t bn_forward_stats(const void* x, HalfType dt, int64_t M, int64_t C, const float* weight, const float* bias,
                      float eps, float momentum, float* running_mean, float* running_var, float* save_mean,
                      float* save_invstd, float* scale, float* shift, float* workspace, cudaStream_t stream);

// SyncBatchNorm, forward in two halves around an all-reduce (sum over ranks) of `sums`: bn_forward_sums writes this
// rank's sums (double, 2C + 1) = [sum (x - k), sum (x - k)^2, M] with k a shift every rank shares (the running mean,
// close to the batch mean once training runs); bn_stats_from_sums then computes what bn_forward_stats does from the
// sums over ranks (the count in sums[2C]).
cudaError_t bn_forward_sums(const void* x, HalfType dt, int64_t M, int64_t C, const float* k, double* sums,
                            float* workspace, cudaStream_t stream);
cudaError_t bn_stats_from_sums(const double* sums, const float* k, int64_t C, const float* weight, const float* bias,
                               float eps, float momentum, float* running_mean, float* running_var, float* save_mean,
                               float* save_invstd, float* scale, float* shift, cudaStream_t stream);

// scale = weight / sqrt(running_var + eps), shift = bias - running_mean * scale.
cudaError_t bn_eval_scale_shift(const float* weight, const float* bias, const float* running_mean, const float* running_var,
                         float eps, int64_t C, float* scale, float* shift, cudaStream_t stream);

// The ReLU's mask as bits (relu_bits below): whether the tensors fit (C a multiple of 8, 16-byte aligned; z and y
// may be null), and its size (M x C / 8 bytes: bit i of byte r * C / 8 + v is y > 0 at row r, channel 8 v + i).
bool bn_relu_bits_fit(int64_t C, const void* x, const void* z, const void* y);
int64_t bn_relu_bits_bytes(int64_t M, int64_t C);

// y = x * scale + shift (+ z) (then max(., 0) when relu); z may be null. x, z, y: M x C. relu_bits (may be null;
// with relu, where bn_relu_bits_fit): y > 0 as stored, for a backward that need not read y (a sixteenth of its bytes).
cudaError_t bn_apply(const void* x, const void* z, void* y, BnTypes types, int64_t M, int64_t C, const float* scale,
                     const float* shift, bool relu, uint8_t* relu_bits, cudaStream_t stream);

// The gradients of y = act(bn(x) (+ z)) given dy: g = dy (+ dy2), masked by the ReLU's output > 0 when relu;
// dbias = sum g, dweight = sum g * xhat; dx = weight * invstd * (g - dbias / M - xhat * dweight / M); dz (if not
// null) = g. The ReLU's mask: the forward's relu_bits where given (bn_apply), else y > 0 where y is given, else
// recomputed from x with the forward's scale and shift (bn_forward_stats), which saves reading y where nothing else
// needs it. The gradient may be written to dz before dx is computed. dy2 (may be null): a second gradient of the same
// y (y read by two layers, as a block's output is by the next block's convolution and its shortcut), summed in fp32
// in the reduction instead of by a separate add; only with relu, y or relu_bits, and dz given (else
// cudaErrorInvalidValue, as for relu_bits where the tensors do not fit them).
cudaError_t bn_backward(const void* dy, const void* dy2, const void* y, const uint8_t* relu_bits, const void* x,
                        void* dx, void* dz, BnTypes types, int64_t M, int64_t C, const float* weight,
                        const float* save_mean, const float* save_invstd, const float* scale, const float* shift,
                        bool relu, float* dweight, float* dbias, float* workspace, cudaStream_t stream);

// SyncBatchNorm, backward in two halves around an all-reduce of `sums` (double, 2C): bn_backward_sums writes this
// rank's [sum g, sum g * (x - mean)], this rank's dweight and dbias (the data-parallel gradient all-reduce sums
// those, as for any parameter) and dz as bn_backward may; bn_backward_from_sums then writes dx (and dz) from the sums
// over ranks and the count over ranks (the forward's sums[2C]). The same y, relu_bits, dz and relu in both calls;
// dy2 as in bn_backward, in the first call only (the second reads the summed gradient back from dz).
cudaError_t bn_backward_sums(const void* dy, const void* dy2, const void* y, const uint8_t* relu_bits, const void* x,
                             void* dz, HalfType dt, int64_t M, int64_t C, const float* save_mean,
                             const float* save_invstd, const float* scale, const float* shift, bool relu,
                             float* dweight, float* dbias, double* sums, float* workspace, cudaStream_t stream);
cudaError_t bn_backward_from_sums(const void* dy, const void* y, const uint8_t* relu_bits, const void* x, void* dx,
                                  void* dz, HalfType dt, int64_t M, int64_t C, const float* weight,
                                  const float* save_mean, const float* save_invstd, const float* scale,
                                  const float* shift, bool relu, const double* sums, const double* count,
                                  float* workspace, cudaStream_t stream);

}  // namespace trainer::kernels
