// CPU kernel of the fused policy-view op `augment_views` (schema in augment_ops.cpp).
//
// Images run in parallel, one image at a time per thread, through three float planes [Ho, Wo] that stay
// in the core's cache (reused from image to image):
//   1. warp: crop + resize + flip as one bilinear 2x3 map (zero outside). Axis-aligned maps (every policy's
//      crop: m01 = m10 = 0) are separable: per output row the two source rows are blended once, then each
//      output pixel is a lerp of that blended row at a column precomputed per image; other maps sample each
//      pixel (sample_rgb);
//   2. colour: the image's ColorJitter ops in its order, each one vectorised pass over the planes (contrast
//      takes the mean luma of the planes at that point of the chain), then grayscale;
//   3. blur: separable Gaussian with per-image sigma and reflect padding, a horizontal pass into a second
//      buffer and a vertical pass fused with the epilogue (images without blur go straight to 4);
//   4. epilogue: solarize, normalise, store as float32 or bfloat16, NCHW or NHWC.
// The per-pixel maths are those of augment_views_math.h, which the CUDA kernels (augment_cuda.cu) share:
// the CPU suite tests the functions the GPU runs. The loops over pixels are compiled twice (x86-64-v3:
// AVX2 + FMA, and baseline x86-64), the first run where the core's ISA policy allows it (common/cpu_isa.h).
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "augment/augment_views_args.h"
#include "augment/augment_views_math.h"
#include "common/cpu_isa.h"
#include "common/parallel.h"


namespace invfast {
namespace augment {
namespace {

using namespace views;

// one-thread cost of one output value of a view (warp, colour, blur): bench_ops.py size, AMD EPYC, 2026-11-28
constexpr double kViewNs = 16.0;

// Per-thread buffers, sized for one image and reused for every image the thread runs.
struct Scratch {
  int64_t n = 0;                  // Ho * Wo
  std::unique_ptr<float[]> plane;  // 3 planes [Ho, Wo]: the image between the stages
  std::unique_ptr<float[]> blur;   // 3 planes: the horizontal blur pass
  std::unique_ptr<float[]> row;    // 3 source rows of W + 4 (2 zeros each side): the vertically blended rows
  std::unique_ptr<float[]> acc;    // one output row: the vertical blur accumulator
  std::unique_ptr<float[]> fx;     // per output column: the horizontal lerp weight
  std::unique_ptr<int32_t[]> ix;   // per output column: the left neighbour's index in `row` (source x + 2)
  Scratch(int64_t H, int64_t W, int64_t Ho, int64_t Wo, bool with_blur)
      : n(Ho * Wo), plane(new float[3 * Ho * Wo]), blur(with_blur ? new float[3 * Ho * Wo] : nullptr),
        row(new float[3 * (W + 4)]), acc(new float[Wo]), fx(new float[Wo]), ix(new int32_t[Wo]) {
    std::fill(row.get(), row.get() + 3 * (W + 4), 0.0f);
  }
};

template <typename T>
inline float raw(T v) { return static_cast<float>(v); }

// Blend two source rows (lo: y0, hi: y0 + 1; nullptr = outside, zeros) over columns [x0, x1): t = a + fy (b - a).
template <typename T>
inline void blend_rows(const T* __restrict__ lo, const T* __restrict__ hi, float fy, int64_t x0, int64_t x1,
                       float* __restrict__ t) {
  if (lo && hi) {
    for (int64_t x = x0; x < x1; ++x) { const float a = raw(lo[x]); t[x] = a + fy * (raw(hi[x]) - a); }
  } else if (lo) {
    for (int64_t x = x0; x < x1; ++x) { const float a = raw(lo[x]); t[x] = a + fy * (0.0f - a); }
  } else if (hi) {
    for (int64_t x = x0; x < x1; ++x) t[x] = fy * raw(hi[x]);
  } else {
    for (int64_t x = x0; x < x1; ++x) t[x] = 0.0f;
  }
}

// One output row of one channel: out[x] = (t[ix] + fx (t[ix + 1] - t[ix])) * unit.
inline void lerp_row(const float* __restrict__ t, const int32_t* __restrict__ ix, const float* __restrict__ fx, float unit,
                     int64_t Wo, float* __restrict__ out) {
  for (int64_t x = 0; x < Wo; ++x) {
    const float a = t[ix[x]], b = t[ix[x] + 1];
    out[x] = (a + fx[x] * (b - a)) * unit;
  }
}

template <typename T>
INVFAST_ALWAYS_INLINE void warp_separable_impl(const T* src, int64_t H, int64_t W, const float* m, int64_t Ho, int64_t Wo,
                               float unit, Scratch& s) {
  // columns: x0 in [-2, W] (clamped: beyond, both neighbours are zero padding anyway)
  int64_t lo = W, hi = -1;
  for (int64_t x = 0; x < Wo; ++x) {
    const float sx = m[0] * static_cast<float>(x) + m[2];
    const float x0f = floorf(sx);
    s.fx[x] = sx - x0f;
    const int64_t x0 = static_cast<int64_t>(fmaxf(-2.f, fminf(x0f, static_cast<float>(W))));
    s.ix[x] = static_cast<int32_t>(x0 + 2);
    lo = std::min(lo, x0);
    hi = std::max(hi, x0 + 1);
  }
  const int64_t c0 = std::max<int64_t>(lo, 0), c1 = std::min<int64_t>(hi, W - 1) + 1;  // source columns read
  const int64_t plane = H * W;
  for (int64_t y = 0; y < Ho; ++y) {
    const float sy = m[4] * static_cast<float>(y) + m[5];
    const float y0f = floorf(sy);
    const float fy = sy - y0f;
    const int64_t y0 = static_cast<int64_t>(fmaxf(-2.f, fminf(y0f, static_cast<float>(H))));
    for (int c = 0; c < 3; ++c) {
      const T* base = src + c * plane;
      const T* r0 = (y0 >= 0 && y0 < H) ? base + y0 * W : nullptr;
      const T* r1 = (y0 + 1 >= 0 && y0 + 1 < H) ? base + (y0 + 1) * W : nullptr;
      float* t = s.row.get() + c * (W + 4);
      if (c1 > c0) blend_rows(r0, r1, fy, c0, c1, t + 2);
      lerp_row(t, s.ix.get(), s.fx.get(), unit, Wo, s.plane.get() + c * s.n + y * Wo);
    }
  }
}
INVFAST_ISA_TWICE(template <typename T>, CpuIsa::kAvx2, INVFAST_V3, void, warp_separable,
                  (const T* src, int64_t H, int64_t W, const float* m, int64_t Ho, int64_t Wo, float unit, Scratch& s),
                  (src, H, W, m, Ho, Wo, unit, s))

template <typename T>
void warp_general(const T* src, int64_t H, int64_t W, const float* m, int64_t Ho, int64_t Wo, Scratch& s) {
  float* r = s.plane.get();
  float* g = r + s.n;
  float* b = g + s.n;
  for (int64_t y = 0; y < Ho; ++y)
    for (int64_t x = 0; x < Wo; ++x) {
      float rgb[3];
      sample_rgb(src, H, W, m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5], rgb);
      r[y * Wo + x] = rgb[0];
      g[y * Wo + x] = rgb[1];
      b[y * Wo + x] = rgb[2];
    }
}

// Mean luma of the planes (float sums of 512 pixels, added in float64).
inline float mean_luma(const float* __restrict__ r, const float* __restrict__ g, const float* __restrict__ b, int64_t n) {
  double total = 0.0;
  for (int64_t c = 0; c < n; c += 512) {
    const int64_t e = std::min(n, c + 512);
    float part = 0.f;
#pragma omp simd reduction(+ : part)
    for (int64_t i = c; i < e; ++i) part += luma(r[i], g[i], b[i]);
    total += part;
  }
  return static_cast<float>(total / static_cast<double>(n));
}

// The colour chain on the planes: jitter in the image's order (ops 0 brightness, 1 contrast, 2 saturation,
// 3 hue), then grayscale. Each op is one loop over the pixels.
INVFAST_ALWAYS_INLINE void colour_planes_impl(float* __restrict__ r, float* __restrict__ g, float* __restrict__ b, int64_t n, const int64_t* order, const float* factors,
                              bool gray) {
  for (int step = 0; order && step < 4; ++step) {
    const int64_t op = order[step];
    const float f = factors[op];
    if (op == kBrightness) {
      for (int64_t i = 0; i < n; ++i) { r[i] = clamp01(r[i] * f); g[i] = clamp01(g[i] * f); b[i] = clamp01(b[i] * f); }
    } else if (op == kContrast) {
      const float q = 1.0f - f, m = mean_luma(r, g, b, n) * q;
      for (int64_t i = 0; i < n; ++i) {
        r[i] = clamp01(f * r[i] + m); g[i] = clamp01(f * g[i] + m); b[i] = clamp01(f * b[i] + m);
      }
    } else if (op == kSaturation) {
      const float q = 1.0f - f;
      for (int64_t i = 0; i < n; ++i) {
        const float l = q * luma(r[i], g[i], b[i]);
        r[i] = clamp01(f * r[i] + l); g[i] = clamp01(f * g[i] + l); b[i] = clamp01(f * b[i] + l);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        float rgb[3] = {r[i], g[i], b[i]};
        adjust_hue(rgb, f);
        r[i] = rgb[0]; g[i] = rgb[1]; b[i] = rgb[2];
      }
    }
  }
  if (gray)
    for (int64_t i = 0; i < n; ++i) r[i] = g[i] = b[i] = luma(r[i], g[i], b[i]);
}
INVFAST_ISA_TWICE(, CpuIsa::kAvx2, INVFAST_V3, void, colour_planes,
                  (float* __restrict__ r, float* __restrict__ g, float* __restrict__ b, int64_t n, const int64_t* order, const float* factors, bool gray),
                  (r, g, b, n, order, factors, gray))

// Horizontal Gaussian pass of one row (taps k[0..2R], reflect padding).
INVFAST_ALWAYS_INLINE void blur_row_h_impl(const float* __restrict__ row, const float* __restrict__ k, int64_t R, int64_t Wo,
                           float* __restrict__ out) {
  const int64_t lo = std::min(R, Wo), hi = std::max(lo, Wo - R);
  for (int64_t x = 0; x < lo; ++x) {
    float a = 0.f;
    for (int64_t t = -R; t <= R; ++t) a += k[t + R] * row[reflect(x + t, Wo)];
    out[x] = a;
  }
#pragma omp simd
  for (int64_t x = lo; x < hi; ++x) {
    float a = 0.f;
    for (int64_t t = 0; t <= 2 * R; ++t) a += k[t] * row[x - R + t];
    out[x] = a;
  }
  for (int64_t x = hi; x < Wo; ++x) {
    float a = 0.f;
    for (int64_t t = -R; t <= R; ++t) a += k[t + R] * row[reflect(x + t, Wo)];
    out[x] = a;
  }
}
INVFAST_ISA_TWICE(, CpuIsa::kAvx2, INVFAST_V3, void, blur_row_h,
                  (const float* __restrict__ row, const float* __restrict__ k, int64_t R, int64_t Wo, float* __restrict__ out),
                  (row, k, R, Wo, out))

// Vertical Gaussian pass for output row y of one plane: acc[x] = sum_t k[t] plane[reflect(y - R + t)][x].
INVFAST_ALWAYS_INLINE void blur_row_v_impl(const float* __restrict__ plane, const float* __restrict__ k, int64_t R, int64_t Ho,
                           int64_t Wo, int64_t y, float* __restrict__ acc) {
  std::fill(acc, acc + Wo, 0.f);
  for (int64_t t = 0; t <= 2 * R; ++t) {
    const float* src = plane + reflect(y - R + t, Ho) * Wo;
    const float w = k[t];
    for (int64_t x = 0; x < Wo; ++x) acc[x] += w * src[x];
  }
}
INVFAST_ISA_TWICE(, CpuIsa::kAvx2, INVFAST_V3, void, blur_row_v,
                  (const float* __restrict__ plane, const float* __restrict__ k, int64_t R, int64_t Ho, int64_t Wo, int64_t y, float* __restrict__ acc),
                  (plane, k, R, Ho, Wo, y, acc))

// Epilogue of one row of channel c: solarize, normalise, store with `stride` (1 NCHW, 3 NHWC).
template <typename O>
INVFAST_ALWAYS_INLINE void store_row_impl(const float* __restrict__ v, int64_t Wo, bool sol, float thr, float mean, float sd, O* __restrict__ out,
                          int64_t stride) {
  if (stride == 1) {
    for (int64_t x = 0; x < Wo; ++x) out[x] = static_cast<O>(epilogue(v[x], sol, thr, mean, sd));
  } else {
    for (int64_t x = 0; x < Wo; ++x) out[x * stride] = static_cast<O>(epilogue(v[x], sol, thr, mean, sd));
  }
}
INVFAST_ISA_TWICE(template <typename O>, CpuIsa::kAvx2, INVFAST_V3, void, store_row,
                  (const float* __restrict__ v, int64_t Wo, bool sol, float thr, float mean, float sd, O* __restrict__ out, int64_t stride),
                  (v, Wo, sol, thr, mean, sd, out, stride))

// Normalised float32 taps [2R+1] of image b (R = 0: no blur), as the torch path builds them.
std::vector<float> taps(const ViewArgs& a, int64_t b) {
  const bool on = a.blur.defined() && a.blur.data_ptr<bool>()[b];
  const double sigma = on ? a.sigma.data_ptr<double>()[b] : 0.0;
  const int64_t R = on ? blur_radius(sigma, std::min(a.Ho, a.Wo) - 1) : 0;
  std::vector<double> w(2 * R + 1);
  double sum = 0.0;
  for (int64_t t = -R; t <= R; ++t) sum += (w[t + R] = R == 0 ? 1.0 : gauss_tap(sigma, t));
  std::vector<float> k(2 * R + 1);
  for (int64_t t = 0; t < 2 * R + 1; ++t) k[t] = static_cast<float>(w[t] / sum);
  return k;
}

template <typename T, typename O>
void view_image(const ViewArgs& a, int64_t b, Scratch& s, O* out, bool nhwc) {
  const int64_t H = a.H, W = a.W, Ho = a.Ho, Wo = a.Wo, n = s.n;
  const T* src = a.images.data_ptr<T>() + b * 3 * H * W;
  const float* m = a.matrix.data_ptr<float>() + b * 6;
  const float unit = std::is_same<T, uint8_t>::value ? 1.0f / 255.0f : 1.0f;
  if (m[1] == 0.f && m[3] == 0.f) warp_separable<T>(src, H, W, m, Ho, Wo, unit, s);
  else warp_general<T>(src, H, W, m, Ho, Wo, s);

  float* p[3] = {s.plane.get(), s.plane.get() + n, s.plane.get() + 2 * n};
  const bool jit = a.jitter.defined() && a.jitter.data_ptr<bool>()[b];
  const bool gry = a.gray.defined() && a.gray.data_ptr<bool>()[b];
  if (jit || gry)
    colour_planes(p[0], p[1], p[2], n, jit ? a.order.data_ptr<int64_t>() + b * 4 : nullptr,
                  jit ? a.factors.data_ptr<float>() + b * 4 : nullptr, gry);

  const bool sol = a.solarize.defined() && a.solarize.data_ptr<bool>()[b];
  const float* mean = a.mean.data_ptr<float>();
  const float* sd = a.std.data_ptr<float>();
  const int64_t stride = nhwc ? 3 : 1;
  auto row_out = [&](int64_t c, int64_t y) {
    return nhwc ? out + ((b * Ho + y) * Wo) * 3 + c : out + ((b * 3 + c) * Ho + y) * Wo;
  };
  const std::vector<float> k = taps(a, b);
  const int64_t R = (static_cast<int64_t>(k.size()) - 1) / 2;
  if (R == 0) {
    for (int c = 0; c < 3; ++c)
      for (int64_t y = 0; y < Ho; ++y)
        store_row<O>(p[c] + y * Wo, Wo, sol, a.threshold, mean[c], sd[c], row_out(c, y), stride);
    return;
  }
  for (int c = 0; c < 3; ++c) {
    float* h = s.blur.get() + c * n;
    for (int64_t y = 0; y < Ho; ++y) blur_row_h(p[c] + y * Wo, k.data(), R, Wo, h + y * Wo);
    for (int64_t y = 0; y < Ho; ++y) {
      blur_row_v(h, k.data(), R, Ho, Wo, y, s.acc.get());
      store_row<O>(s.acc.get(), Wo, sol, a.threshold, mean[c], sd[c], row_out(c, y), stride);
    }
  }
}

template <typename T, typename O>
void run(const ViewArgs& a, at::Tensor& out, bool channels_last) {
  O* o = reinterpret_cast<O*>(out.data_ptr());
  const bool with_blur = a.blur.defined();
  parallel::run_items_with(
      a.B, parallel::cost(a.B, 3 * a.Ho * a.Wo, kViewNs), [&] { return Scratch(a.H, a.W, a.Ho, a.Wo, with_blur); },
      [&](int64_t b, Scratch& s) { view_image<T, O>(a, b, s, o, channels_last); });
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
    const int64_t* o = a.order.data_ptr<int64_t>();
    for (int64_t b = 0; b < a.B; ++b) {
      int seen = 0;
      for (int s = 0; s < 4; ++s) seen |= (o[b * 4 + s] >= 0 && o[b * 4 + s] < 4) ? 1 << o[b * 4 + s] : 16;
      TORCH_CHECK(seen == 15, "augment_views: every row of order must be a permutation of 0..3, row ", b, " is not");
    }
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

TORCH_LIBRARY_IMPL(invfast, CPU, m) {
  m.impl("augment_views", &invfast::augment::augment_views_cpu);
}
