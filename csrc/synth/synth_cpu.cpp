// CPU kernels of the synthetic-data ops: per-sample loops (groups of whole samples taken as items by torch's
// threads, csrc/common/parallel.h), so a sample's bytes never depend on the batch it is generated in.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/color.h"
#include "common/parallel.h"

#include "common/no_fp_contract.h"  // after every other include

namespace invfast {
namespace {

void check_obj(const at::Tensor& pm, const char* op) {
  TORCH_CHECK(pm.dim() == 4 && pm.size(1) == 4 && pm.scalar_type() == at::kFloat, op,
              ": obj must be float32 [B, 4, H, W] premultiplied RGBA, got ", pm.sizes());
}

void check_vec(const at::Tensor& v, int64_t B, at::ScalarType t, const char* op, const char* name) {
  TORCH_CHECK(v.dim() == 1 && v.size(0) == B && v.scalar_type() == t, op, ": ", name, " must be a 1-D ",
              t, " tensor of length ", B);
}

int64_t grain_for(int64_t HW) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(HW, 1)); }

// one-thread cost per value of a sample (bench_ops.py sizes, 1 thread, AMD EPYC, 2026-11-28): compositing, the
// colour pipeline (HSV round trip included), one blur tap of either pass, the bilinear warp
constexpr double kCompositeNs = 4.4, kColorNs = 18.0, kBlurTapNs = 0.2, kWarpNs = 11.0;

// f(b0, b1) over groups of whole samples [b0, b1), each group an item of parallel::run_items (no thread team
// below 2 ms of estimated work; a descheduled thread delays the call by at most its group); ``values`` values
// per sample at ``ns_per_value`` each.
template <typename F>
void for_sample_groups(int64_t B, int64_t values, double ns_per_value, const F& f) {
  const int64_t group = grain_for(values);
  parallel::run_items((B + group - 1) / group, parallel::cost(B, values, ns_per_value), 0,
                      [&](int64_t i, float*) { f(i * group, std::min(B, (i + 1) * group)); });
}

// ---------------------------------------------------------------------------- composite
at::Tensor synth_composite_cpu(const at::Tensor& obj_in, const at::Tensor& bgs_in, const at::Tensor& idx_in) {
  check_obj(obj_in, "synth_composite");
  TORCH_CHECK(bgs_in.dim() == 4 && bgs_in.size(1) == 3 && bgs_in.scalar_type() == at::kByte,
              "synth_composite: backgrounds must be uint8 [N, 3, H, W]");
  TORCH_CHECK(bgs_in.size(2) == obj_in.size(2) && bgs_in.size(3) == obj_in.size(3),
              "synth_composite: background and object sizes differ");
  check_vec(idx_in, obj_in.size(0), at::kLong, "synth_composite", "bg_index");
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
  for_sample_groups(B, HW, kCompositeNs, [&](int64_t b0, int64_t b1) {
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
          v = (v + 12582912.0f) - 12582912.0f;  // round half to even (exact for 0 <= v <= 255)
          dc[p] = static_cast<uint8_t>(v);
        }
      }
    }
  });
  return out;
}

// ---------------------------------------------------------------------------- colour
constexpr int64_t kHue = 1, kBrightness = 2, kContrast = 4, kGrayscale = 8, kPosterize = 16, kInvert = 32;

using color::clamp01;
using color::floor_small;
using color::luma;

// Hue rotation in HSV (torchvision adjust_hue semantics, the sector form), branch-free so the loop vectorises.
void hue_rows(float* R, float* G, float* Bc, const float* alpha, int64_t n, float shift) {
  for (int64_t p = 0; p < n; ++p) {
    if (alpha[p] == 0.0f) continue;  // premultiplied by 0 at the end: the colour cannot matter
    const color::Hsv hsv = color::hsv_from_rgb(R[p], G[p], Bc[p]);
    float h = hsv.h + shift;
    h = h - floor_small(h);  // python-style remainder by 1
    float rgb[3];
    color::hsv_to_rgb_sectors(h, hsv.s, hsv.v, rgb);
    R[p] = rgb[0];
    G[p] = rgb[1];
    Bc[p] = rgb[2];
  }
}

at::Tensor synth_color_cpu(const at::Tensor& pm_in, const at::Tensor& hue_in, const at::Tensor& bright_in,
                           const at::Tensor& contrast_in, const at::Tensor& flags_in, int64_t posterize_bits) {
  check_obj(pm_in, "synth_color");
  const int64_t B = pm_in.size(0), HW = pm_in.size(2) * pm_in.size(3);
  check_vec(hue_in, B, at::kFloat, "synth_color", "hue");
  check_vec(bright_in, B, at::kFloat, "synth_color", "brightness");
  check_vec(contrast_in, B, at::kFloat, "synth_color", "contrast");
  check_vec(flags_in, B, at::kLong, "synth_color", "flags");
  TORCH_CHECK(posterize_bits >= 1 && posterize_bits <= 8, "synth_color: posterize_bits must be in 1..8");
  const auto pm = pm_in.contiguous();
  const auto hue = hue_in.contiguous(), bright = bright_in.contiguous(), con = contrast_in.contiguous();
  const auto flags = flags_in.contiguous();
  auto out = at::empty_like(pm);
  const float* src = pm.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const float* hp = hue.data_ptr<float>();
  const float* bp = bright.data_ptr<float>();
  const float* cp = con.data_ptr<float>();
  const int64_t* fp = flags.data_ptr<int64_t>();
  const float step = static_cast<float>(1 << (8 - posterize_bits));
  const float step_scale = step / 255.0f;
  for_sample_groups(B, HW, kColorNs, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* s = src + b * 4 * HW;
      const float* a = s + 3 * HW;
      float* d = dst + b * 4 * HW;
      float *R = d, *G = d + HW, *Bc = d + 2 * HW, *A = d + 3 * HW;
      const int64_t fl = fp[b];
      for (int64_t c = 0; c < 3; ++c) {
        const float* sc = s + c * HW;
        float* dc = d + c * HW;
        for (int64_t p = 0; p < HW; ++p) {
          const float ap = a[p];
          const float q = sc[p] / (ap > 0.0f ? ap : 1.0f);
          dc[p] = ap > 0.0f ? clamp01(q) : 0.0f;
        }
      }
      if (fl & kHue) hue_rows(R, G, Bc, a, HW, hp[b]);
      if (fl & kBrightness) {
        const float f = bp[b];
        for (int64_t p = 0; p < 3 * HW; ++p) d[p] = clamp01(d[p] * f);
      }
      if (fl & kContrast) {
        double lum_sum = 0.0, a_sum = 0.0;
        for (int64_t p = 0; p < HW; ++p) {
          lum_sum += static_cast<double>(luma(R[p], G[p], Bc[p])) * static_cast<double>(a[p]);
          a_sum += static_cast<double>(a[p]);
        }
        const float mean = static_cast<float>(lum_sum / std::max(a_sum, 1e-12));
        const float cf = cp[b];
        const float om = mean * (1.0f - cf);
        for (int64_t p = 0; p < 3 * HW; ++p) d[p] = clamp01(d[p] * cf + om);
      }
      if (fl & kGrayscale) {
        for (int64_t p = 0; p < HW; ++p) {
          const float l = luma(R[p], G[p], Bc[p]);
          R[p] = l; G[p] = l; Bc[p] = l;
        }
      }
      if (fl & kPosterize) {
        for (int64_t p = 0; p < 3 * HW; ++p) {
          float v = d[p] * 255.0f;
          v = (v + 12582912.0f) - 12582912.0f;  // round half to even (|v| < 2^22)
          d[p] = floor_small(v / step) * step_scale;
        }
      }
      if (fl & kInvert) {
        for (int64_t p = 0; p < 3 * HW; ++p) d[p] = 1.0f - d[p];
      }
      for (int64_t c = 0; c < 3; ++c) {
        float* dc = d + c * HW;
        for (int64_t p = 0; p < HW; ++p) dc[p] = dc[p] * a[p];
      }
      for (int64_t p = 0; p < HW; ++p) A[p] = a[p];
    }
  });
  return out;
}

// ---------------------------------------------------------------------------- separable blur
inline int64_t edge_index(int64_t i, int64_t n, bool reflect) {
  if (reflect) {
    if (i < 0) return -i;
    if (i >= n) return 2 * n - 2 - i;
    return i;
  }
  return i < 0 ? 0 : (i >= n ? n - 1 : i);
}

at::Tensor synth_blur_cpu(const at::Tensor& x_in, const at::Tensor& taps_in) {
  TORCH_CHECK(x_in.dim() == 4 && x_in.scalar_type() == at::kFloat, "synth_blur: x must be float32 [B, C, H, W]");
  TORCH_CHECK(taps_in.dim() == 2 && taps_in.size(0) == x_in.size(0) && taps_in.scalar_type() == at::kFloat &&
                  taps_in.size(1) % 2 == 1,
              "synth_blur: taps must be float32 [B, K] with K odd");
  const auto x = x_in.contiguous();
  const auto taps = taps_in.contiguous();
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), K = taps.size(1), pad = K / 2;
  const bool reflect = pad < std::min(H, W);
  auto out = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* tp = taps.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for_sample_groups(B, C * H * W, kBlurTapNs * static_cast<double>(2 * K), [&](int64_t b0, int64_t b1) {
    // rows padded by `pad` on each side; the inner loops run over contiguous j (vectorisable) and
    // sum the taps in order k = 0..K-1, exactly as the reference's shifted-slice sum.
    std::vector<float> row(W + 2 * pad), tmp(H * W);
    std::vector<const float*> rows(K);
    for (int64_t b = b0; b < b1; ++b) {
      const float* w = tp + b * K;
      for (int64_t c = 0; c < C; ++c) {
        const float* s = xp + (b * C + c) * H * W;
        float* d = op + (b * C + c) * H * W;
        for (int64_t i = 0; i < H; ++i) {
          const float* si = s + i * W;
          float* ti = tmp.data() + i * W;
          for (int64_t j = -pad; j < W + pad; ++j) row[j + pad] = si[edge_index(j, W, reflect)];
          const float* r = row.data();
          const float w0 = w[0];
          for (int64_t j = 0; j < W; ++j) ti[j] = r[j] * w0;
          for (int64_t k = 1; k < K; ++k) {
            const float wk = w[k];
            const float* rk = r + k;
            for (int64_t j = 0; j < W; ++j) ti[j] = ti[j] + rk[j] * wk;
          }
        }
        for (int64_t i = 0; i < H; ++i) {
          float* di = d + i * W;
          const float* t0 = tmp.data() + edge_index(i - pad, H, reflect) * W;
          const float w0 = w[0];
          for (int64_t j = 0; j < W; ++j) di[j] = t0[j] * w0;
          for (int64_t k = 1; k < K; ++k) {
            const float* tk = tmp.data() + edge_index(i + k - pad, H, reflect) * W;
            const float wk = w[k];
            for (int64_t j = 0; j < W; ++j) di[j] = di[j] + tk[j] * wk;
          }
        }
      }
    }
  });
  return out;
}

// ---------------------------------------------------------------------------- affine warp
at::Tensor synth_warp_cpu(const at::Tensor& pm_in, const at::Tensor& inv_in, const at::Tensor& off_in,
                          bool premultiplied) {
  TORCH_CHECK(pm_in.dim() == 4 && pm_in.scalar_type() == at::kFloat, "synth_warp: x must be float32 [B, C, H, W]");
  const int64_t B = pm_in.size(0), C = pm_in.size(1), H = pm_in.size(2), W = pm_in.size(3);
  TORCH_CHECK(inv_in.dim() == 3 && inv_in.size(0) == B && inv_in.size(1) == 2 && inv_in.size(2) == 2 &&
                  inv_in.scalar_type() == at::kFloat,
              "synth_warp: inv must be float32 [B, 2, 2]");
  TORCH_CHECK(off_in.dim() == 2 && off_in.size(0) == B && off_in.size(1) == 2 && off_in.scalar_type() == at::kFloat,
              "synth_warp: offset must be float32 [B, 2]");
  const auto x = pm_in.contiguous();
  const auto inv = inv_in.contiguous();
  const auto off = off_in.contiguous();
  auto out = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* ip = inv.data_ptr<float>();
  const float* fp = off.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const bool skip_clear = C == 4 && premultiplied;
  for_sample_groups(B, C * H * W, kWarpNs, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* m = ip + b * 4;
      const float ox = fp[b * 2], oy = fp[b * 2 + 1];
      const float* s = xp + b * C * H * W;
      float* d = op + b * C * H * W;
      int64_t ilo = 0, ihi = H, jlo = 0, jhi = W;
      if (skip_clear) {
        // Only output pixels near the forward image of the input's alpha box can be non-zero:
        // zero the sample, then visit a conservative box (input box widened by 1 px for the
        // bilinear taps, output box widened by 2 px for rounding).
        std::fill(d, d + C * H * W, 0.0f);
        const float* sa = s + 3 * H * W;
        int64_t ay0 = H, ay1 = -1, ax0 = W, ax1 = -1;
        for (int64_t i = 0; i < H; ++i)
          for (int64_t j = 0; j < W; ++j)
            if (sa[i * W + j] != 0.0f) {
              ay0 = std::min(ay0, i); ay1 = std::max(ay1, i); ax0 = std::min(ax0, j); ax1 = std::max(ax1, j);
            }
        if (ay1 < 0) continue;
        const double det = static_cast<double>(m[0]) * m[3] - static_cast<double>(m[1]) * m[2];
        if (std::isfinite(det) && std::abs(det) > 1e-12) {
          const double f00 = m[3] / det, f01 = -m[1] / det, f10 = -m[2] / det, f11 = m[0] / det;
          const double qx[2] = {2.0 * (ax0 - 1) / W - 1.0, 2.0 * (ax1 + 2) / W - 1.0};
          const double qy[2] = {2.0 * (ay0 - 1) / H - 1.0, 2.0 * (ay1 + 2) / H - 1.0};
          double pxmin = 1e30, pxmax = -1e30, pymin = 1e30, pymax = -1e30;
          for (int u = 0; u < 2; ++u)
            for (int v = 0; v < 2; ++v) {
              const double px = f00 * qx[u] + f01 * qy[v] + ox, py = f10 * qx[u] + f11 * qy[v] + oy;
              pxmin = std::min(pxmin, px); pxmax = std::max(pxmax, px);
              pymin = std::min(pymin, py); pymax = std::max(pymax, py);
            }
          auto lo = [](double pmin, int64_t n) {
            const double k = std::floor((pmin + 1.0) * n / 2.0 - 0.5) - 2.0;
            return static_cast<int64_t>(std::max(0.0, std::min(static_cast<double>(n), k)));
          };
          auto hi = [](double pmax, int64_t n) {
            const double k = std::ceil((pmax + 1.0) * n / 2.0 - 0.5) + 3.0;
            return static_cast<int64_t>(std::max(0.0, std::min(static_cast<double>(n), k)));
          };
          jlo = lo(pxmin, W); jhi = hi(pxmax, W); ilo = lo(pymin, H); ihi = hi(pymax, H);
        }
      }
      for (int64_t i = ilo; i < ihi; ++i) {
        const float ys = (static_cast<float>(i) * 2.0f + 1.0f) / static_cast<float>(H) - 1.0f;
        const float dy = ys - oy;
        for (int64_t j = jlo; j < jhi; ++j) {
          const float xs = (static_cast<float>(j) * 2.0f + 1.0f) / static_cast<float>(W) - 1.0f;
          const float dx = xs - ox;
          const float gx = dx * m[0] + dy * m[1];
          const float gy = dx * m[2] + dy * m[3];
          float fx = ((gx + 1.0f) * static_cast<float>(W) - 1.0f) / 2.0f;
          float fy = ((gy + 1.0f) * static_cast<float>(H) - 1.0f) / 2.0f;
          // far outside the image (or NaN): every tap is out of range; keeps floor_small exact
          fx = fx > -2.0f ? (fx < static_cast<float>(W) + 1.0f ? fx : static_cast<float>(W) + 1.0f) : -2.0f;
          fy = fy > -2.0f ? (fy < static_cast<float>(H) + 1.0f ? fy : static_cast<float>(H) + 1.0f) : -2.0f;
          const float x0f = floor_small(fx), y0f = floor_small(fy);
          const float wx1 = fx - x0f, wy1 = fy - y0f, wx0 = 1.0f - wx1, wy0 = 1.0f - wy1;
          const int64_t x0 = static_cast<int64_t>(x0f), y0 = static_cast<int64_t>(y0f);
          const bool vx0 = x0 >= 0 && x0 < W, vx1 = x0 + 1 >= 0 && x0 + 1 < W;
          const bool vy0 = y0 >= 0 && y0 < H, vy1 = y0 + 1 >= 0 && y0 + 1 < H;
          const float w00 = (vy0 && vx0) ? wy0 * wx0 : 0.0f, w01 = (vy0 && vx1) ? wy0 * wx1 : 0.0f;
          const float w10 = (vy1 && vx0) ? wy1 * wx0 : 0.0f, w11 = (vy1 && vx1) ? wy1 * wx1 : 0.0f;
          const int64_t cx0 = std::min<int64_t>(std::max<int64_t>(x0, 0), W - 1);
          const int64_t cx1 = std::min<int64_t>(std::max<int64_t>(x0 + 1, 0), W - 1);
          const int64_t cy0 = std::min<int64_t>(std::max<int64_t>(y0, 0), H - 1);
          const int64_t cy1 = std::min<int64_t>(std::max<int64_t>(y0 + 1, 0), H - 1);
          const int64_t o00 = cy0 * W + cx0, o01 = cy0 * W + cx1, o10 = cy1 * W + cx0, o11 = cy1 * W + cx1;
          if (skip_clear) {
            // premultiplied RGBA: all four alpha taps zero (or weightless) => every channel is zero
            const float* sa = s + 3 * H * W;
            if ((sa[o00] == 0.0f || w00 == 0.0f) && (sa[o01] == 0.0f || w01 == 0.0f) &&
                (sa[o10] == 0.0f || w10 == 0.0f) && (sa[o11] == 0.0f || w11 == 0.0f)) {
              for (int64_t c = 0; c < C; ++c) d[c * H * W + i * W + j] = 0.0f;
              continue;
            }
          }
          for (int64_t c = 0; c < C; ++c) {
            const float* sc = s + c * H * W;
            const float v = sc[o00] * w00 + sc[o01] * w01 + sc[o10] * w10 + sc[o11] * w11;
            d[c * H * W + i * W + j] = v;
          }
        }
      }
    }
  });
  return out;
}

}  // namespace
}  // namespace invfast

TORCH_LIBRARY_IMPL(invfast, CPU, m) {
  m.impl("synth_composite", &invfast::synth_composite_cpu);
  m.impl("synth_color", &invfast::synth_color_cpu);
  m.impl("synth_blur", &invfast::synth_blur_cpu);
  m.impl("synth_warp", &invfast::synth_warp_cpu);
}
