// CPU kernel of the fused policy-view op `augment_views` (schema in augment_ops.cpp).
//
// It runs the same stages as the CUDA kernels (augment_cuda.cu) with the same per-pixel functions
// (augment_views_math.h), so the CPU suite tests the GPU algorithm; the CPU walks each output row as three
// channel arrays with one loop per op (vectorisable), the GPU one pixel per thread through the whole chain:
//   A. (jitter only) per image, the mean luma of the warped image after the jitter ops that precede
//      contrast in its order: the one non-pointwise quantity of the colour chain;
//   B. per pixel: bilinear warp (crop + resize + flip as one 2x3 map), jitter in the image's order,
//      grayscale; without a blur stage also solarize + normalise + store;
//   C. (blur only) horizontal Gaussian pass, reflect padding, per-image sigma (radius 0 = copy);
//   D. (blur only) vertical pass + solarize + normalise + store (float32 or bfloat16, NCHW or NHWC).
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <vector>

#include "augment/augment_views_args.h"
#include "augment/augment_views_math.h"

#ifndef INVFAST_AUGMENT_NS
#define INVFAST_AUGMENT_NS invfast
#endif

namespace invfast {
namespace augment {
namespace {

using namespace views;

// The colour chain on one row held as three channel arrays: the loop over the row sits inside the op
// switch so that each op's loop vectorises (the per-pixel functions are those of the CUDA kernels).
inline void jitter_row(int64_t op, float f, float gray_mean, float* r, float* g, float* b, int64_t n) {
  if (op == kBrightness) {
    for (int64_t x = 0; x < n; ++x) { r[x] = clamp01(r[x] * f); g[x] = clamp01(g[x] * f); b[x] = clamp01(b[x] * f); }
  } else if (op == kContrast) {
    const float q = 1.0f - f;
    for (int64_t x = 0; x < n; ++x) {
      r[x] = clamp01(f * r[x] + q * gray_mean); g[x] = clamp01(f * g[x] + q * gray_mean); b[x] = clamp01(f * b[x] + q * gray_mean);
    }
  } else if (op == kSaturation) {
    const float q = 1.0f - f;
    for (int64_t x = 0; x < n; ++x) {
      const float l = luma(r[x], g[x], b[x]);
      r[x] = clamp01(f * r[x] + q * l); g[x] = clamp01(f * g[x] + q * l); b[x] = clamp01(f * b[x] + q * l);
    }
  } else {
    for (int64_t x = 0; x < n; ++x) {
      float rgb[3] = {r[x], g[x], b[x]};
      adjust_hue(rgb, f);
      r[x] = rgb[0]; g[x] = rgb[1]; b[x] = rgb[2];
    }
  }
}

template <typename T>
inline void warp_row(const T* s, const ViewArgs& a, const float* m, int64_t y, float* r, float* g, float* b) {
  for (int64_t x = 0; x < a.Wo; ++x) {
    float rgb[3];
    sample_rgb(s, a.H, a.W, m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5], rgb);
    r[x] = rgb[0]; g[x] = rgb[1]; b[x] = rgb[2];
  }
}

template <typename T>
void stage_mean(const ViewArgs& a, double* gray_mean) {
  const T* src = a.images.data_ptr<T>();
  const float* mat = a.matrix.data_ptr<float>();
  const bool* jit = a.jitter.data_ptr<bool>();
  const float* fac = a.factors.data_ptr<float>();
  const int64_t* ord = a.order.data_ptr<int64_t>();
  at::parallel_for(0, a.B, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> r(a.Wo), g(a.Wo), bl(a.Wo);
    for (int64_t b = begin; b < end; ++b) {
      gray_mean[b] = 0.0;
      if (!jit[b]) continue;
      const float* m = mat + b * 6;
      const T* s = src + b * 3 * a.H * a.W;
      double sum = 0.0;
      for (int64_t y = 0; y < a.Ho; ++y) {
        warp_row(s, a, m, y, r.data(), g.data(), bl.data());
        // the ops before contrast (jitter_prefix of the CUDA kernel, row-wise)
        for (int step = 0; step < 4 && ord[b * 4 + step] != kContrast; ++step) {
          const int64_t op = ord[b * 4 + step];
          jitter_row(op, fac[b * 4 + op], 0.f, r.data(), g.data(), bl.data(), a.Wo);
        }
        float row = 0.f;
        for (int64_t x = 0; x < a.Wo; ++x) row += luma(r[x], g[x], bl[x]);
        sum += row;
      }
      gray_mean[b] = sum / static_cast<double>(a.Ho * a.Wo);
    }
  });
}

template <typename T, typename O>
void stage_pointwise(const ViewArgs& a, const double* gray_mean, float* scratch, O* out, OutLayout lay) {
  const T* src = a.images.data_ptr<T>();
  const float* mat = a.matrix.data_ptr<float>();
  const bool* jit = a.jitter.defined() ? a.jitter.data_ptr<bool>() : nullptr;
  const float* fac = jit ? a.factors.data_ptr<float>() : nullptr;
  const int64_t* ord = jit ? a.order.data_ptr<int64_t>() : nullptr;
  const bool* gry = a.gray.defined() ? a.gray.data_ptr<bool>() : nullptr;
  const bool* sol = a.solarize.defined() ? a.solarize.data_ptr<bool>() : nullptr;
  const float* mean = a.mean.data_ptr<float>();
  const float* stdv = a.std.data_ptr<float>();
  const float threshold = a.threshold;
  const int64_t Wo = a.Wo;
  at::parallel_for(0, a.B * a.Ho, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(3 * Wo);
    float* ch[3] = {buf.data(), buf.data() + Wo, buf.data() + 2 * Wo};
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / a.Ho, y = r % a.Ho;
      warp_row(src + b * 3 * a.H * a.W, a, mat + b * 6, y, ch[0], ch[1], ch[2]);
      if (jit && jit[b]) {
        const float gm = static_cast<float>(gray_mean[b]);
        for (int step = 0; step < 4; ++step) {
          const int64_t op = ord[b * 4 + step];
          jitter_row(op, fac[b * 4 + op], gm, ch[0], ch[1], ch[2], Wo);
        }
      }
      if (gry && gry[b]) {
        for (int64_t x = 0; x < Wo; ++x) ch[0][x] = ch[1][x] = ch[2][x] = luma(ch[0][x], ch[1][x], ch[2][x]);
      }
      if (scratch) {
        for (int c = 0; c < 3; ++c) std::copy(ch[c], ch[c] + Wo, scratch + ((b * 3 + c) * a.Ho + y) * Wo);
      } else {
        const bool so = sol && sol[b];
        for (int c = 0; c < 3; ++c)
          for (int64_t x = 0; x < Wo; ++x)
            out[lay.at(b, c, y, x)] = static_cast<O>(epilogue(ch[c][x], so, threshold, mean[c], stdv[c]));
      }
    }
  });
}

// Normalised float32 taps [2R+1] of image b (R = 0: a copy), as the torch path builds them.
std::vector<float> taps(const ViewArgs& a, int64_t b) {
  const bool on = a.blur.data_ptr<bool>()[b];
  const double sigma = a.sigma.data_ptr<double>()[b];
  const int64_t R = on ? blur_radius(sigma, std::min(a.Ho, a.Wo) - 1) : 0;
  std::vector<double> w(2 * R + 1);
  double sum = 0.0;
  for (int64_t t = -R; t <= R; ++t) sum += (w[t + R] = R == 0 ? 1.0 : gauss_tap(sigma, t));
  std::vector<float> k(2 * R + 1);
  for (int64_t t = 0; t < 2 * R + 1; ++t) k[t] = static_cast<float>(w[t] / sum);
  return k;
}

template <typename O>
void stage_blur(const ViewArgs& a, const float* scratch, float* scratch2, O* out, OutLayout lay) {
  const bool* sol = a.solarize.defined() ? a.solarize.data_ptr<bool>() : nullptr;
  const float* mean = a.mean.data_ptr<float>();
  const float* stdv = a.std.data_ptr<float>();
  const int64_t Ho = a.Ho, Wo = a.Wo;
  // C: horizontal pass
  at::parallel_for(0, a.B * 3 * Ho, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (3 * Ho);
      const std::vector<float> k = taps(a, b);
      const int64_t R = (static_cast<int64_t>(k.size()) - 1) / 2;
      const float* row = scratch + r * Wo;
      for (int64_t x = 0; x < Wo; ++x) {
        float acc = 0.f;
        for (int64_t t = -R; t <= R; ++t) acc += k[t + R] * row[reflect(x + t, Wo)];
        scratch2[r * Wo + x] = acc;
      }
    }
  });
  // D: vertical pass and the epilogue
  at::parallel_for(0, a.B * 3 * Ho, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (3 * Ho), c = (r / Ho) % 3, y = r % Ho;
      const std::vector<float> k = taps(a, b);
      const int64_t R = (static_cast<int64_t>(k.size()) - 1) / 2;
      const float* plane = scratch2 + (b * 3 + c) * Ho * Wo;
      for (int64_t x = 0; x < Wo; ++x) {
        float acc = 0.f;
        for (int64_t t = -R; t <= R; ++t) acc += k[t + R] * plane[reflect(y + t, Ho) * Wo + x];
        out[lay.at(b, c, y, x)] = static_cast<O>(epilogue(acc, sol && sol[b], a.threshold, mean[c], stdv[c]));
      }
    }
  });
}

template <typename T, typename O>
void run(const ViewArgs& a, at::Tensor& out, bool channels_last) {
  const OutLayout lay{a.Ho, a.Wo, channels_last};
  std::vector<double> gray_mean(a.B, 0.0);
  if (a.jitter.defined()) stage_mean<T>(a, gray_mean.data());
  O* o = reinterpret_cast<O*>(out.data_ptr());
  if (!a.blur.defined()) {
    stage_pointwise<T, O>(a, gray_mean.data(), nullptr, o, lay);
    return;
  }
  auto scratch = at::empty({a.B, 3, a.Ho, a.Wo}, a.images.options().dtype(at::kFloat));
  auto scratch2 = at::empty_like(scratch);
  stage_pointwise<T, O>(a, gray_mean.data(), scratch.data_ptr<float>(), nullptr, lay);
  stage_blur<O>(a, scratch.data_ptr<float>(), scratch2.data_ptr<float>(), o, lay);
}

at::Tensor augment_views_cpu(const at::Tensor& images, const at::Tensor& matrix, int64_t out_h, int64_t out_w,
                             const c10::optional<at::Tensor>& jitter, const at::Tensor& factors, const at::Tensor& order,
                             const c10::optional<at::Tensor>& grayscale, const c10::optional<at::Tensor>& blur,
                             const at::Tensor& sigma, const c10::optional<at::Tensor>& solarize, double threshold,
                             const at::Tensor& mean, const at::Tensor& std, at::ScalarType dtype, bool channels_last) {
  ViewArgs a = prepare_view_args(images, matrix, out_h, out_w, jitter, factors, order, grayscale, blur, sigma, solarize,
                                 mean, std, dtype);
  a.threshold = static_cast<float>(threshold);
  if (a.jitter.defined()) {
    const auto o = a.order;
    TORCH_CHECK(at::equal(std::get<0>(o.sort(1)), at::arange(4, o.options()).expand({a.B, 4})),
                "augment_views: every row of order must be a permutation of 0..3");
  }
  at::Tensor out = new_view_output(a, channels_last);
  if (a.B == 0) return out;
  const bool u8 = a.images.scalar_type() == at::kByte;
  if (dtype == at::kFloat) {
    if (u8) run<uint8_t, float>(a, out, channels_last); else run<float, float>(a, out, channels_last);
  } else {
    if (u8) run<uint8_t, c10::BFloat16>(a, out, channels_last); else run<float, c10::BFloat16>(a, out, channels_last);
  }
  return out;
}

}  // namespace
}  // namespace augment
}  // namespace invfast

TORCH_LIBRARY_IMPL(INVFAST_AUGMENT_NS, CPU, m) {
  m.impl("augment_views", &invfast::augment::augment_views_cpu);
}
