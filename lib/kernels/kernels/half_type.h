// The 16-bit activation types the kernels take (values; parameters and statistics stay fp32).
#pragma once

namespace trainer::kernels {

enum class HalfType { bf16, fp16 };

}  // namespace trainer::kernels
