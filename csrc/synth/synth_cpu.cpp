// CPU kernel of synth_composite: one pass over the batch, gathering each background by index.
#include <ATen/ATen.h>
#include <torch/library.h>
#include <ATen/Parallel.h>
#include <cmath>

// Bit-identical to the torch reference: no fused multiply-add contraction in this file.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace invfast {
namespace {
at::Tensor synth_composite_cpu(const at::Tensor& obj_in, const at::Tensor& bgs_in, const at::Tensor& idx_in) {
  TORCH_CHECK(obj_in.dim() == 4 && obj_in.size(1) == 4 && obj_in.scalar_type() == at::kFloat,
              "synth_composite: obj must be float32 [B, 4, H, W]");
  TORCH_CHECK(bgs_in.dim() == 4 && bgs_in.size(1) == 3 && bgs_in.scalar_type() == at::kByte,
              "synth_composite: backgrounds must be uint8 [N, 3, H, W]");
  TORCH_CHECK(bgs_in.size(2) == obj_in.size(2) && bgs_in.size(3) == obj_in.size(3),
              "synth_composite: background and object sizes differ");
  TORCH_CHECK(idx_in.dim() == 1 && idx_in.size(0) == obj_in.size(0) && idx_in.scalar_type() == at::kLong,
              "synth_composite: bg_index must be int64 [B]");
  const auto obj = obj_in.contiguous();
  const auto bgs = bgs_in.contiguous();
  const auto idx = idx_in.contiguous();
  const int64_t B = obj.size(0), HW = obj.size(2) * obj.size(3), N = bgs.size(0);
  auto out = at::empty({B, 3, obj.size(2), obj.size(3)}, obj.options().dtype(at::kByte));
  const float* op = obj.data_ptr<float>();
  const uint8_t* bp = bgs.data_ptr<uint8_t>();
  const int64_t* ip = idx.data_ptr<int64_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(ip[b] >= 0 && ip[b] < N, "synth_composite: bg_index[", b, "] = ", ip[b], " out of range");
  at::parallel_for(0, B, std::max<int64_t>(1, 16384 / std::max<int64_t>(HW, 1)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* o = op + b * 4 * HW;
      const float* a = o + 3 * HW;
      const uint8_t* bg = bp + ip[b] * 3 * HW;
      uint8_t* d = dst + b * 3 * HW;
      for (int64_t c = 0; c < 3; ++c) {
        const float* oc = o + c * HW;
        const uint8_t* bc = bg + c * HW;
        uint8_t* dc = d + c * HW;
        for (int64_t p = 0; p < HW; ++p) {
          // same operation order as the torch reference: bg * (1 - a) + rgb * 255, clamp, round half-even
          const float one_minus_a = 1.0f - a[p];
          const float t1 = static_cast<float>(bc[p]) * one_minus_a;
          const float t2 = oc[p] * 255.0f;
          float v = t1 + t2;
          v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
          // round half to even for 0 <= v <= 255 (exact: 1.5 * 2^23 shifts the fraction out)
          v = (v + 12582912.0f) - 12582912.0f;
          dc[p] = static_cast<uint8_t>(v);
        }
      }
    }
  });
  return out;
}
}  // namespace
}  // namespace invfast

TORCH_LIBRARY_IMPL(invfast, CPU, m) { m.impl("synth_composite", &invfast::synth_composite_cpu); }
