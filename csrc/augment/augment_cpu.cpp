// CPU kernels for the batched warps of the test transforms: every image of a batch through
// every one of P affine maps (warp_affine) or coordinate fields (warp_coords, the elastic deform), bilinear, constant fill, in the images' dtype (uint8 rounds half up).
// The source coordinates of an output row are computed once per (map, row) and reused for all
// B*C image planes, which is what makes it faster than a general sampler.
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/parallel.h"

namespace invfast {
namespace augment {

// output rows (of all P maps) per work item, and the one-thread cost of one output value (bilinear, float32)
constexpr int64_t kRowsPerItem = 8;
constexpr double kWarpNs = 3.5;

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

template <typename T> inline T store(typename Acc<T>::type v) { return static_cast<T>(v); }
template <> inline uint8_t store<uint8_t>(float v) {
  v += 0.5f;
  v = v < 0.f ? 0.f : (v > 255.f ? 255.f : v);
  return static_cast<uint8_t>(v);
}

// `coord(p, y, x, sx, sy)` gives the source point of output pixel (x, y) of map p.
template <typename T, typename Coord>
void warp_kernel(const T* src, Coord coord, const double* fill, T* dst, int64_t B, int64_t C,
                 int64_t H, int64_t W, int64_t P, int64_t Ho, int64_t Wo) {
  using A = typename Acc<T>::type;
  const int64_t plane = H * W;
  const int64_t rows = P * Ho, items = (rows + kRowsPerItem - 1) / kRowsPerItem;
  parallel::run_items(items, parallel::cost(rows * B * C, Wo, kWarpNs), 0, [&](int64_t item, float*) {
    const int64_t begin = item * kRowsPerItem, end = std::min(rows, begin + kRowsPerItem);
    std::vector<int64_t> i00(Wo), i01(Wo), i10(Wo), i11(Wo);
    std::vector<A> fxs(Wo), fys(Wo);
    std::vector<A> fillc(C);
    for (int64_t c = 0; c < C; ++c) fillc[c] = static_cast<A>(fill[c]);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t p = r / Ho, y = r % Ho;
      for (int64_t x = 0; x < Wo; ++x) {
        double sx, sy;
        coord(p, y, x, sx, sy);
        const double x0f = std::floor(sx), y0f = std::floor(sy);
        fxs[x] = static_cast<A>(sx - x0f);
        fys[x] = static_cast<A>(sy - y0f);
        // far outside: clamp before the integer conversion (the index is -1 anyway)
        const int64_t x0 = static_cast<int64_t>(std::max(-2.0, std::min(x0f, static_cast<double>(W) + 1)));
        const int64_t y0 = static_cast<int64_t>(std::max(-2.0, std::min(y0f, static_cast<double>(H) + 1)));
        const bool vx0 = x0 >= 0 && x0 < W, vx1 = x0 + 1 >= 0 && x0 + 1 < W;
        const bool vy0 = y0 >= 0 && y0 < H, vy1 = y0 + 1 >= 0 && y0 + 1 < H;
        i00[x] = (vy0 && vx0) ? y0 * W + x0 : -1;
        i01[x] = (vy0 && vx1) ? y0 * W + x0 + 1 : -1;
        i10[x] = (vy1 && vx0) ? (y0 + 1) * W + x0 : -1;
        i11[x] = (vy1 && vx1) ? (y0 + 1) * W + x0 + 1 : -1;
      }
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t c = 0; c < C; ++c) {
          const T* s = src + (b * C + c) * plane;
          T* d = dst + (((b * P + p) * C + c) * Ho + y) * Wo;
          const A f = fillc[c];
          for (int64_t x = 0; x < Wo; ++x) {
            const A v00 = i00[x] >= 0 ? static_cast<A>(s[i00[x]]) : f;
            const A v01 = i01[x] >= 0 ? static_cast<A>(s[i01[x]]) : f;
            const A v10 = i10[x] >= 0 ? static_cast<A>(s[i10[x]]) : f;
            const A v11 = i11[x] >= 0 ? static_cast<A>(s[i11[x]]) : f;
            const A top = v00 + fxs[x] * (v01 - v00);
            const A bot = v10 + fxs[x] * (v11 - v10);
            d[x] = store<T>(top + fys[x] * (bot - top));
          }
        }
      }
    }
  });
}

at::Tensor warp_affine_cpu(const at::Tensor& images_in, const at::Tensor& matrix_in, int64_t out_h, int64_t out_w,
                           const at::Tensor& fill_in) {
  TORCH_CHECK(images_in.dim() == 4, "warp_affine: images must be [B, C, H, W], got ", images_in.dim(), " dims");
  TORCH_CHECK(matrix_in.dim() == 3 && matrix_in.size(1) == 2 && matrix_in.size(2) == 3,
              "warp_affine: matrix must be [P, 2, 3]");
  TORCH_CHECK(out_h > 0 && out_w > 0, "warp_affine: output size must be positive");
  const auto images = images_in.contiguous();
  const auto matrix = matrix_in.to(at::kDouble).contiguous();
  const auto fill = fill_in.to(at::kDouble).contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const int64_t P = matrix.size(0);
  TORCH_CHECK(fill.numel() == C, "warp_affine: fill must have one value per channel (", C, "), got ", fill.numel());
  auto out = at::empty({B, P, C, out_h, out_w}, images.options());
  if (B * P * C == 0) return out;
  const double* mat = matrix.data_ptr<double>();
  auto coord = [mat](int64_t p, int64_t y, int64_t x, double& sx, double& sy) {
    const double* m = mat + p * 6;
    sx = m[0] * x + m[1] * y + m[2];
    sy = m[3] * x + m[4] * y + m[5];
  };
  AT_DISPATCH_SWITCH(images.scalar_type(), "warp_affine_cpu",
    AT_DISPATCH_CASE(at::kByte, [&] {
      warp_kernel<uint8_t>(images.data_ptr<uint8_t>(), coord, fill.data_ptr<double>(),
                           out.data_ptr<uint8_t>(), B, C, H, W, P, out_h, out_w); })
    AT_DISPATCH_CASE(at::kFloat, [&] {
      warp_kernel<float>(images.data_ptr<float>(), coord, fill.data_ptr<double>(),
                         out.data_ptr<float>(), B, C, H, W, P, out_h, out_w); })
    AT_DISPATCH_CASE(at::kDouble, [&] {
      warp_kernel<double>(images.data_ptr<double>(), coord, fill.data_ptr<double>(),
                          out.data_ptr<double>(), B, C, H, W, P, out_h, out_w); }));
  return out;
}

at::Tensor warp_coords_cpu(const at::Tensor& images_in, const at::Tensor& coords_in, const at::Tensor& fill_in) {
  TORCH_CHECK(images_in.dim() == 4, "warp_coords: images must be [B, C, H, W], got ", images_in.dim(), " dims");
  TORCH_CHECK(coords_in.dim() == 4 && coords_in.size(3) == 2, "warp_coords: coords must be [P, Ho, Wo, 2], got shape ",
              coords_in.sizes());
  const auto images = images_in.contiguous();
  const auto coords = coords_in.to(at::kDouble).contiguous();
  const auto fill = fill_in.to(at::kDouble).contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const int64_t P = coords.size(0), Ho = coords.size(1), Wo = coords.size(2);
  TORCH_CHECK(fill.numel() == C, "warp_coords: fill must have one value per channel (", C, "), got ", fill.numel());
  auto out = at::empty({B, P, C, Ho, Wo}, images.options());
  if (B * P * C * Ho * Wo == 0) return out;
  const double* cp = coords.data_ptr<double>();
  auto coord = [cp, Ho, Wo](int64_t p, int64_t y, int64_t x, double& sx, double& sy) {
    const double* q = cp + ((p * Ho + y) * Wo + x) * 2;
    sx = q[0];
    sy = q[1];
  };
  AT_DISPATCH_SWITCH(images.scalar_type(), "warp_coords_cpu",
    AT_DISPATCH_CASE(at::kByte, [&] {
      warp_kernel<uint8_t>(images.data_ptr<uint8_t>(), coord, fill.data_ptr<double>(),
                           out.data_ptr<uint8_t>(), B, C, H, W, P, Ho, Wo); })
    AT_DISPATCH_CASE(at::kFloat, [&] {
      warp_kernel<float>(images.data_ptr<float>(), coord, fill.data_ptr<double>(),
                         out.data_ptr<float>(), B, C, H, W, P, Ho, Wo); })
    AT_DISPATCH_CASE(at::kDouble, [&] {
      warp_kernel<double>(images.data_ptr<double>(), coord, fill.data_ptr<double>(),
                          out.data_ptr<double>(), B, C, H, W, P, Ho, Wo); }));
  return out;
}

}  // namespace augment
}  // namespace invfast

TORCH_LIBRARY_IMPL(invfast, CPU, m) {
  m.impl("warp_affine", &invfast::augment::warp_affine_cpu);
  m.impl("warp_coords", &invfast::augment::warp_coords_cpu);
}
