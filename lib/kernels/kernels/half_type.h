// The 16-bit activation types the kernels take (values; parameters and statistics stay fp32).
#pragma once

namespace trainer::kernels {

enum class HalfType { bf16, fp16 };

// An input the layout kernels (pad_channels.h, space_to_depth.h) read: fp32 or either 16-bit type.
enum class ElemType { f32, bf16, fp16 };

}  // namespace trainer::kernels
