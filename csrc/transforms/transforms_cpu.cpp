// CPU entry points of the transforms op family (schemas in transforms_ops.cpp): input checks, the output
// [B, P, C, H, W], and the spread of images x parameters over torch's intra-op threads. The per-image
// kernels are in kernels.h.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "transforms/kernels.h"

namespace invfast {
namespace tt {
namespace {

// one-thread cost per output byte (per input byte for the histogram) of each kind of work, measured on
// 16 photographs of 224 px, 16 values (benchmarks/bench_shared_machine.py sizes), AMD EPYC, 2026-11-28
constexpr double kCopyNs = 0.05;      // integral warps (flips, whole-pixel shifts) and padding: memory copies
constexpr double kTableNs = 0.35;     // table look-ups (brightness, contrast, posterize, ...) and level counts
constexpr double kBlendNs = 0.5;      // saturation / sharpness blends
constexpr double kHueNs = 0.9;        // the HSV round trip
constexpr double kBilinearNs = 1.4;   // fractional warps (rotation, scale, shear, crop)
constexpr double kBlurTapNs = 0.1;    // the separable blur, per byte and tap radius
// pixels per work item of the point-wise ops (their per-pixel features stay in L2)
constexpr int64_t kChunk = 2048;
// images per work item of the warp (a general map's coordinates are computed once per group)
constexpr int64_t kWarpGroup = 8;

using parallel::cost;
using parallel::run_items;

at::Tensor checked_images(const at::Tensor& images, const char* op, bool rgb) {
  TORCH_CHECK(images.device().is_cpu(), op, ": images must be on the CPU, got ", images.device());
  TORCH_CHECK(images.scalar_type() == at::kByte, op, ": images must be uint8, got ", images.scalar_type());
  TORCH_CHECK(images.dim() == 4, op, ": images must be [B, C, H, W], got shape ", images.sizes());
  TORCH_CHECK(!rgb || images.size(1) == 3, op, ": images must be RGB [B, 3, H, W], got shape ", images.sizes());
  TORCH_CHECK(images.size(2) * images.size(3) < (int64_t(1) << 31), op, ": an image plane must hold < 2^31 pixels");
  return images.contiguous();
}

at::Tensor checked_params(const at::Tensor& p, const char* op, const char* name) {
  TORCH_CHECK(p.device().is_cpu(), op, ": ", name, " must be on the CPU");
  TORCH_CHECK(p.scalar_type() == at::kFloat && p.dim() == 1, op, ": ", name, " must be a 1-D float32 tensor [P], got ",
              p.scalar_type(), " of shape ", p.sizes());
  return p.contiguous();
}

at::Tensor lut_u8_cpu(const at::Tensor& images_in, const at::Tensor& tables_in) {
  const auto images = checked_images(images_in, "lut_u8", false);
  const int64_t B = images.size(0), C = images.size(1), HW = images.size(2) * images.size(3);
  TORCH_CHECK(tables_in.device().is_cpu() && tables_in.scalar_type() == at::kByte && tables_in.dim() == 4 &&
                  tables_in.size(3) == 256,
              "lut_u8: tables must be uint8 [Bt, P, Ct, 256] on the CPU, got ", tables_in.scalar_type(), " of shape ",
              tables_in.sizes());
  const auto tables = tables_in.contiguous();
  const int64_t Bt = tables.size(0), P = tables.size(1), Ct = tables.size(2);
  TORCH_CHECK(Bt == 1 || Bt == B, "lut_u8: tables must have 1 or B = ", B, " rows (one per image), got ", Bt);
  TORCH_CHECK(Ct == 1 || Ct == C, "lut_u8: tables must have 1 or C = ", C, " channels, got ", Ct);
  auto out = at::empty({B, P, C, images.size(2), images.size(3)}, images.options());
  const uint8_t* src = images.data_ptr<uint8_t>();
  const uint8_t* tab = tables.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  std::vector<LutKind> kinds(static_cast<size_t>(Bt * P * Ct));
  for (int64_t t = 0; t < Bt * P * Ct; ++t) kinds[t] = classify_lut(tab + t * 256);
  run_items(B * P, cost(B * P, C * HW, kTableNs), 0, [&](int64_t i, float*) {
    const int64_t b = i / P, p = i % P;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t t = ((Bt == 1 ? 0 : b) * P + p) * Ct + (Ct == 1 ? 0 : c);
      lut_plane(src + (b * C + c) * HW, HW, tab + t * 256, kinds[t], dst + ((b * P + p) * C + c) * HW);
    }
  });
  return out;
}

at::Tensor histogram_u8_cpu(const at::Tensor& images_in) {
  const auto images = checked_images(images_in, "histogram_u8", false);
  const int64_t B = images.size(0), C = images.size(1), HW = images.size(2) * images.size(3);
  auto out = at::zeros({B, C, 256}, images.options().dtype(at::kLong));
  const uint8_t* src = images.data_ptr<uint8_t>();
  int64_t* hist = out.data_ptr<int64_t>();
  run_items(B * C, cost(B * C, HW, kTableNs), 0, [&](int64_t i, float*) { histogram_plane(src + i * HW, HW, hist + i * 256); });
  return out;
}

int blend_mode(c10::string_view degenerate) {
  const std::string d(degenerate.data(), degenerate.size());
  if (d == "luma") return kLuma;
  if (d == "luma_levels") return kLumaLevels;
  if (d == "smooth_levels") return kSmoothLevels;
  TORCH_CHECK(false, "blend_u8: degenerate must be 'luma', 'luma_levels' or 'smooth_levels', got '", d, "'");
  return -1;
}

at::Tensor blend_u8_cpu(const at::Tensor& images_in, const at::Tensor& factors_in, c10::string_view degenerate) {
  const int mode = blend_mode(degenerate);
  const auto images = checked_images(images_in, "blend_u8", true);
  const auto factors = checked_params(factors_in, "blend_u8", "factors");
  const int64_t B = images.size(0), H = images.size(2), W = images.size(3), HW = H * W, P = factors.size(0);
  auto out = at::empty({B, P, 3, H, W}, images.options());
  const int64_t chunks = (HW + kChunk - 1) / kChunk;
  const uint8_t* src = images.data_ptr<uint8_t>();
  const float* f = factors.data_ptr<float>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  run_items(B * chunks, cost(B, P * 3 * HW, kBlendNs), 6 * kChunk, [&](int64_t i, float* scratch) {
    const int64_t b = i / chunks, i0 = (i % chunks) * kChunk;
    blend_chunk(src + b * 3 * HW, H, W, i0, std::min(HW, i0 + kChunk), mode, f, P, dst + b * P * 3 * HW, scratch);
  });
  return out;
}

at::Tensor hue_u8_cpu(const at::Tensor& images_in, const at::Tensor& shifts_in) {
  const auto images = checked_images(images_in, "hue_u8", true);
  const auto shifts = checked_params(shifts_in, "hue_u8", "shifts");
  const int64_t B = images.size(0), H = images.size(2), W = images.size(3), HW = H * W, P = shifts.size(0);
  const float* s = shifts.data_ptr<float>();
  for (int64_t p = 0; p < P; ++p)
    TORCH_CHECK(s[p] >= -0.5f && s[p] <= 0.5f, "hue_u8: shifts must be in [-0.5, 0.5], got ", s[p]);
  auto out = at::empty({B, P, 3, H, W}, images.options());
  const int64_t chunks = (HW + kChunk - 1) / kChunk;
  const uint8_t* src = images.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  run_items(B * chunks, cost(B, P * 3 * HW, kHueNs), 3 * kChunk, [&](int64_t i, float* scratch) {
    const int64_t b = i / chunks, i0 = (i % chunks) * kChunk;
    hue_chunk(src + b * 3 * HW, HW, i0, std::min(HW, i0 + kChunk), s, P, dst + b * P * 3 * HW, scratch);
  });
  return out;
}

at::Tensor blur_u8_cpu(const at::Tensor& images_in, const at::Tensor& taps_in) {
  const auto images = checked_images(images_in, "blur_u8", false);
  TORCH_CHECK(taps_in.device().is_cpu() && taps_in.scalar_type() == at::kFloat && taps_in.dim() == 2 &&
                  taps_in.size(1) % 2 == 1,
              "blur_u8: taps must be float32 [P, 2R + 1] on the CPU, got ", taps_in.scalar_type(), " of shape ",
              taps_in.sizes());
  const auto taps = taps_in.contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3), HW = H * W;
  const int64_t P = taps.size(0), K = taps.size(1), R = K / 2;
  // each row's radius (zeros at its ends trimmed) and its half taps w[0..r], w[0] the centre
  std::vector<int64_t> radius(P);
  std::vector<float> half(P * (R + 1));
  const float* t = taps.data_ptr<float>();
  for (int64_t p = 0; p < P; ++p) {
    const float* row = t + p * K;
    int64_t r = R;
    while (r > 0 && row[R - r] == 0.0f && row[R + r] == 0.0f) --r;
    for (int64_t k = 0; k <= R; ++k)
      TORCH_CHECK(row[R - k] == row[R + k], "blur_u8: taps must be symmetric; row ", p, " is not");
    TORCH_CHECK(r < H && r < W, "blur_u8: a blur radius (", r, ") must be smaller than the image (", H, "x", W,
                ") for reflect padding");
    radius[p] = r;
    for (int64_t k = 0; k <= R; ++k) half[p * (R + 1) + k] = row[R + k];
  }
  auto out = at::empty({B, P, C, H, W}, images.options());
  const uint8_t* src = images.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  const int64_t rmax = P ? *std::max_element(radius.begin(), radius.end()) : 0;
  run_items(B * P, cost(B * P, C * HW * (1 + rmax), kBlurTapNs), blur_scratch_floats(H, W, rmax), [&](int64_t i, float* scratch) {
    const int64_t b = i / P, p = i % P;
    for (int64_t c = 0; c < C; ++c)
      blur_plane(src + (b * C + c) * HW, H, W, half.data() + p * (R + 1), radius[p], dst + ((b * P + p) * C + c) * HW,
                 scratch);
  });
  return out;
}

// uint8 padding holds the fill levels, float padding the exact fill
void pad_image(const uint8_t* img, int64_t C, int64_t H, int64_t W, const uint8_t* level, const double*,
               uint8_t* padded) {
  pad_planes(img, C, H, W, level, padded);
}
void pad_image(const uint8_t* img, int64_t C, int64_t H, int64_t W, const uint8_t*, const double* fill, float* padded) {
  pad_planes(img, C, H, W, fill, padded);
}

at::Tensor warp_affine_u8_cpu(const at::Tensor& images_in, const at::Tensor& matrix_in, const at::Tensor& fill_in) {
  const auto images = checked_images(images_in, "warp_affine_u8", false);
  TORCH_CHECK(matrix_in.device().is_cpu() && matrix_in.dim() == 3 && matrix_in.size(1) == 2 && matrix_in.size(2) == 3,
              "warp_affine_u8: matrix must be [P, 2, 3] on the CPU, got shape ", matrix_in.sizes());
  const auto matrix = matrix_in.to(at::kDouble).contiguous();
  const auto fill = fill_in.to(at::kDouble).contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3), HW = H * W;
  const int64_t P = matrix.size(0);
  TORCH_CHECK(fill.numel() == C, "warp_affine_u8: fill must have one value per channel (", C, "), got ", fill.numel());
  const double* m = matrix.data_ptr<double>();
  const double* fv = fill.data_ptr<double>();
  for (int64_t i = 0; i < 6 * P; ++i) TORCH_CHECK(std::isfinite(m[i]), "warp_affine_u8: matrix must be finite");
  std::vector<uint8_t> level(C);
  bool level_fill = true;  // every fill a whole level: the padded planes can stay uint8
  for (int64_t c = 0; c < C; ++c) {
    TORCH_CHECK(fv[c] >= 0.0 && fv[c] <= 255.0, "warp_affine_u8: fill must be in 0..255 (image units), got ", fv[c]);
    level[c] = static_cast<uint8_t>(std::floor(fv[c] + 0.5));
    level_fill = level_fill && level[c] == fv[c];
  }
  std::vector<int> kinds(P);
  bool bilinear = false;
  double warp_ns = 0.0;
  for (int64_t p = 0; p < P; ++p) {
    kinds[p] = classify_map(m + 6 * p);
    const bool interpolates = kinds[p] == kGeneral || kinds[p] == kSeparable;
    bilinear = bilinear || interpolates;
    warp_ns += cost(B, C * HW, interpolates ? kBilinearNs : kCopyNs);
  }
  auto out = at::empty({B, P, C, H, W}, images.options());
  const uint8_t* src = images.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  const int64_t npad = bilinear ? padded_elems(C, H, W) : 0;
  auto run = [&](auto* padded) {
    if (bilinear)
      run_items(B, cost(B, C * HW, kCopyNs), 0, [&](int64_t b, float*) {
        pad_image(src + b * C * HW, C, H, W, level.data(), fv, padded + b * npad);
      });
    // an item is one map over a group of G images (general maps compute their coordinates once per group)
    const int64_t groups = (B + kWarpGroup - 1) / kWarpGroup;
    run_items(groups * P, warp_ns, warp_scratch_floats(W), [&](int64_t i, float* scratch) {
      const int64_t g = i / P, p = i % P, b0 = g * kWarpGroup, n = std::min(kWarpGroup, B - b0);
      warp_images(src + b0 * C * HW, padded + b0 * npad, n, npad, C, H, W, m + 6 * p, kinds[p], level.data(),
                  dst + (b0 * P + p) * C * HW, P * C * HW, scratch);
    });
  };
  if (level_fill) {
    std::vector<uint8_t> padded(static_cast<size_t>(std::max<int64_t>(B * npad, 1)));
    run(padded.data());
  } else {
    std::vector<float> padded(static_cast<size_t>(std::max<int64_t>(B * npad, 1)));
    run(padded.data());
  }
  return out;
}

}  // namespace
}  // namespace tt
}  // namespace invfast

TORCH_LIBRARY_IMPL(invfast, CPU, m) {
  m.impl("lut_u8", &invfast::tt::lut_u8_cpu);
  m.impl("histogram_u8", &invfast::tt::histogram_u8_cpu);
  m.impl("blend_u8", &invfast::tt::blend_u8_cpu);
  m.impl("hue_u8", &invfast::tt::hue_u8_cpu);
  m.impl("blur_u8", &invfast::tt::blur_u8_cpu);
  m.impl("warp_affine_u8", &invfast::tt::warp_affine_u8_cpu);
}
