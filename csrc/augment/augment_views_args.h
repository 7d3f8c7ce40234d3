// Host-side argument checks and normalisation of `augment_views`, shared by the CPU and CUDA entry
// points so that both accept and reject exactly the same inputs.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include <algorithm>
#include <cstdint>

namespace invfast {
namespace augment {

struct ViewArgs {
  at::Tensor images;    // [B, 3, H, W] uint8 or float32, contiguous
  at::Tensor matrix;    // [B, 6] float32: output (x, y) samples the source at (m0 x + m1 y + m2, m3 x + m4 y + m5)
  at::Tensor jitter;    // [B] bool or undefined (no jitter)
  at::Tensor factors;   // [B, 4] float32 (brightness, contrast, saturation, hue)
  at::Tensor order;     // [B, 4] int64, a permutation of 0..3 per sample
  at::Tensor gray;      // [B] bool or undefined
  at::Tensor blur;      // [B] bool or undefined (no blur stage at all)
  at::Tensor sigma;     // [B] float64
  at::Tensor solarize;  // [B] bool or undefined
  at::Tensor mean;      // [3] float32
  at::Tensor std;       // [3] float32
  float threshold = 0.5f;  // solarize: values >= threshold become 1 - value
  int64_t B = 0, H = 0, W = 0, Ho = 0, Wo = 0;
  at::ScalarType out_dtype = at::kFloat;
};

inline at::Tensor bool_mask(const c10::optional<at::Tensor>& t, int64_t B, const char* name, at::Device dev) {
  if (!t.has_value() || !t->defined()) return at::Tensor();
  TORCH_CHECK(t->dim() == 1 && t->size(0) == B, "augment_views: ", name, " must be a [B] = [", B,
              "] mask, got shape ", t->sizes());
  return t->to(dev, at::kBool).contiguous();
}

inline ViewArgs prepare_view_args(const at::Tensor& images, const at::Tensor& matrix, int64_t out_h, int64_t out_w,
                                  const c10::optional<at::Tensor>& jitter, const at::Tensor& factors,
                                  const at::Tensor& order, const c10::optional<at::Tensor>& grayscale,
                                  const c10::optional<at::Tensor>& blur, const at::Tensor& sigma,
                                  const c10::optional<at::Tensor>& solarize, const at::Tensor& mean,
                                  const at::Tensor& std, at::ScalarType dtype) {
  TORCH_CHECK(images.dim() == 4 && images.size(1) == 3, "augment_views: images must be RGB [B, 3, H, W], got shape ",
              images.sizes());
  TORCH_CHECK(images.scalar_type() == at::kByte || at::isFloatingType(images.scalar_type()),
              "augment_views: images must be uint8 (0..255) or floating (0..1), got ", images.scalar_type());
  TORCH_CHECK(out_h > 0 && out_w > 0, "augment_views: output size must be positive, got ", out_h, "x", out_w);
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, "augment_views: output dtype must be float32 or bfloat16, got ",
              dtype);
  ViewArgs a;
  const at::Device dev = images.device();
  a.B = images.size(0);
  a.H = images.size(2);
  a.W = images.size(3);
  a.Ho = out_h;
  a.Wo = out_w;
  a.out_dtype = dtype;
  a.images = images.scalar_type() == at::kByte ? images.contiguous() : images.to(at::kFloat).contiguous();
  TORCH_CHECK(matrix.dim() == 3 && matrix.size(0) == a.B && matrix.size(1) == 2 && matrix.size(2) == 3,
              "augment_views: matrix must be [B, 2, 3] (one affine map per image), got shape ", matrix.sizes());
  a.matrix = matrix.to(dev, at::kFloat).contiguous().view({a.B, 6});
  a.jitter = bool_mask(jitter, a.B, "jitter", dev);
  if (a.jitter.defined()) {
    TORCH_CHECK(factors.dim() == 2 && factors.size(0) == a.B && factors.size(1) == 4,
                "augment_views: factors must be [B, 4] (brightness, contrast, saturation, hue), got shape ",
                factors.sizes());
    TORCH_CHECK(order.dim() == 2 && order.size(0) == a.B && order.size(1) == 4,
                "augment_views: order must be [B, 4] (a permutation of 0..3 per image), got shape ", order.sizes());
    a.factors = factors.to(dev, at::kFloat).contiguous();
    a.order = order.to(dev, at::kLong).contiguous();
  }
  a.gray = bool_mask(grayscale, a.B, "grayscale", dev);
  a.blur = bool_mask(blur, a.B, "blur", dev);
  if (a.blur.defined()) {
    TORCH_CHECK(sigma.dim() == 1 && sigma.size(0) == a.B, "augment_views: sigma must be [B] (blur std in px), got shape ",
                sigma.sizes());
    a.sigma = sigma.to(dev, at::kDouble).contiguous();
  }
  a.solarize = bool_mask(solarize, a.B, "solarize", dev);
  TORCH_CHECK(mean.numel() == 3 && std.numel() == 3, "augment_views: mean and std must have 3 values (RGB), got ",
              mean.numel(), " and ", std.numel());
  a.mean = mean.to(dev, at::kFloat).contiguous();
  a.std = std.to(dev, at::kFloat).contiguous();
  return a;
}

inline at::Tensor new_view_output(const ViewArgs& a, bool channels_last) {
  auto opts = a.images.options().dtype(a.out_dtype);
  auto out = at::empty({a.B, 3, a.Ho, a.Wo}, opts,
                       channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
  return out;
}

// Offset of element (b, c, y, x) of the [B, 3, Ho, Wo] output in NCHW or NHWC (channels_last) memory.
struct OutLayout {
  int64_t Ho, Wo;
  bool nhwc;
#ifdef __CUDACC__
  __host__ __device__
#endif
  inline int64_t at(int64_t b, int64_t c, int64_t y, int64_t x) const {
    return nhwc ? ((b * Ho + y) * Wo + x) * 3 + c : ((b * 3 + c) * Ho + y) * Wo + x;
  }
};

}  // namespace augment
}  // namespace invfast
