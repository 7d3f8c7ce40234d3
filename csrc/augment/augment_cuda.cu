// CUDA kernels of the augment op family (schemas in augment_ops.cpp). Compiled only when torch is a
// CUDA build; uses only the light c10/cuda headers so that nvcc can syntax-check it against a CPU torch.
//
// warp_affine / warp_coords: every image through every one of P maps in ONE launch. A thread owns one
// output pixel of one map: it computes the source point and the bilinear neighbours once and reuses them
// for a chunk of images and all channels (grid.y walks the image chunks). Same maths as augment_cpu.cpp:
// coordinates in float64, float accumulation (double for double images), per-neighbour fill, uint8
// rounded half up; integral maps (flips, 90-degree rotations, integer shifts) hit pixel centres exactly,
// so they copy pixels bit for bit.
//
// augment_views: the fused policy view, in the stages of augment_views_cpu.cpp with the per-pixel
// functions of augment_views_math.h. Launches per call: 1 without jitter and blur (Spatial policy);
// + 1 memset and 1 reduction kernel with jitter (the contrast mean); + 2 with blur (horizontal pass,
// vertical pass with the epilogue). The Default policy is therefore 1 memset + 4 kernels per view batch.
// The blur taps of each image are built once per block in shared memory; a block never spans images.
//
// NOT MEASURED: no GPU was available when these kernels were written; they are syntax-checked with nvcc
// and their algorithm is tested through the CPU kernels. On CUDA, the dispatch table (invfast/dispatch.py)
// keeps the torch path for these ops under `auto` until they are measured (opt in with INVFAST_CUDA_KERNELS=augment).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cstdint>

#include "augment/augment_views_args.h"
#include "augment/augment_views_math.h"
#include "common/cuda_utils.cuh"

namespace invfast {
namespace augment {
namespace {

using cuda_utils::block_sum;
using cuda_utils::blocks_for;
using cuda_utils::kThreads;
using cuda_utils::kWarpsPerBlock;

// ------------------------------------------------------------------------------------------------
// batched warps

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

template <typename T> __device__ __forceinline__ T store(typename Acc<T>::type v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ uint8_t store<uint8_t>(float v) {
  v += 0.5f;
  v = v < 0.f ? 0.f : (v > 255.f ? 255.f : v);
  return static_cast<uint8_t>(v);
}

// kCoords: `geo` is [P, Ho, Wo, 2] source points; else [P, 6] affine maps.
template <typename T, bool kCoords>
__global__ void warp_kernel(const T* __restrict__ src, const double* __restrict__ geo, const double* __restrict__ fill,
                            T* __restrict__ dst, int64_t B, int64_t C, int64_t H, int64_t W, int64_t P, int64_t Ho,
                            int64_t Wo, int64_t images_per_block) {
  using A = typename Acc<T>::type;
  const int64_t n = P * Ho * Wo;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t p = i / (Ho * Wo), yx = i % (Ho * Wo), y = yx / Wo, x = yx % Wo;
  double sx, sy;
  if (kCoords) {
    sx = geo[2 * i];
    sy = geo[2 * i + 1];
  } else {
    const double* m = geo + p * 6;
    sx = m[0] * x + m[1] * y + m[2];
    sy = m[3] * x + m[4] * y + m[5];
  }
  const double x0f = floor(sx), y0f = floor(sy);
  const A fx = static_cast<A>(sx - x0f), fy = static_cast<A>(sy - y0f);
  const int64_t x0 = static_cast<int64_t>(fmax(-2.0, fmin(x0f, static_cast<double>(W) + 1)));
  const int64_t y0 = static_cast<int64_t>(fmax(-2.0, fmin(y0f, static_cast<double>(H) + 1)));
  const bool vx0 = x0 >= 0 && x0 < W, vx1 = x0 + 1 >= 0 && x0 + 1 < W;
  const bool vy0 = y0 >= 0 && y0 < H, vy1 = y0 + 1 >= 0 && y0 + 1 < H;
  const int64_t i00 = (vy0 && vx0) ? y0 * W + x0 : -1, i01 = (vy0 && vx1) ? y0 * W + x0 + 1 : -1;
  const int64_t i10 = (vy1 && vx0) ? (y0 + 1) * W + x0 : -1, i11 = (vy1 && vx1) ? (y0 + 1) * W + x0 + 1 : -1;
  const int64_t plane = H * W;
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * images_per_block;
  const int64_t b1 = b0 + images_per_block < B ? b0 + images_per_block : B;
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      const T* s = src + (b * C + c) * plane;
      const A f = static_cast<A>(fill[c]);
      const A v00 = i00 >= 0 ? static_cast<A>(s[i00]) : f;
      const A v01 = i01 >= 0 ? static_cast<A>(s[i01]) : f;
      const A v10 = i10 >= 0 ? static_cast<A>(s[i10]) : f;
      const A v11 = i11 >= 0 ? static_cast<A>(s[i11]) : f;
      const A top = v00 + fx * (v01 - v00);
      const A bot = v10 + fx * (v11 - v10);
      dst[(((b * P + p) * C + c) * Ho + y) * Wo + x] = store<T>(top + fy * (bot - top));
    }
  }
}

template <bool kCoords>
at::Tensor launch_warp(const at::Tensor& images, const at::Tensor& geo, const at::Tensor& fill, int64_t P, int64_t Ho,
                       int64_t Wo, const char* name) {
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  TORCH_CHECK(fill.numel() == C, name, ": fill must have one value per channel (", C, "), got ", fill.numel());
  auto out = at::empty({B, P, C, Ho, Wo}, images.options());
  const int64_t n = P * Ho * Wo;
  if (B * C * n == 0) return out;
  const int64_t per_block = std::max<int64_t>(8, (B + 65534) / 65535);
  const dim3 grid(blocks_for(n),
                  static_cast<unsigned>((B + per_block - 1) / per_block));
  TORCH_CHECK((n + kThreads - 1) / kThreads < (int64_t{1} << 31), name, ": output too large for one launch");
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_SWITCH(images.scalar_type(), "augment_warp_cuda",
    AT_DISPATCH_CASE(at::kByte, [&] {
      warp_kernel<uint8_t, kCoords><<<grid, kThreads, 0, stream>>>(
          images.data_ptr<uint8_t>(), geo.data_ptr<double>(), fill.data_ptr<double>(), out.data_ptr<uint8_t>(), B, C,
          H, W, P, Ho, Wo, per_block); })
    AT_DISPATCH_CASE(at::kFloat, [&] {
      warp_kernel<float, kCoords><<<grid, kThreads, 0, stream>>>(
          images.data_ptr<float>(), geo.data_ptr<double>(), fill.data_ptr<double>(), out.data_ptr<float>(), B, C,
          H, W, P, Ho, Wo, per_block); })
    AT_DISPATCH_CASE(at::kDouble, [&] {
      warp_kernel<double, kCoords><<<grid, kThreads, 0, stream>>>(
          images.data_ptr<double>(), geo.data_ptr<double>(), fill.data_ptr<double>(), out.data_ptr<double>(), B, C,
          H, W, P, Ho, Wo, per_block); }));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor warp_affine_cuda(const at::Tensor& images_in, const at::Tensor& matrix_in, int64_t out_h, int64_t out_w,
                            const at::Tensor& fill_in) {
  TORCH_CHECK(images_in.dim() == 4, "warp_affine: images must be [B, C, H, W], got ", images_in.dim(), " dims");
  TORCH_CHECK(matrix_in.dim() == 3 && matrix_in.size(1) == 2 && matrix_in.size(2) == 3,
              "warp_affine: matrix must be [P, 2, 3]");
  TORCH_CHECK(out_h > 0 && out_w > 0, "warp_affine: output size must be positive");
  const c10::cuda::CUDAGuard guard(images_in.device());
  const auto images = images_in.contiguous();
  const auto matrix = matrix_in.to(images.device(), at::kDouble).contiguous();
  const auto fill = fill_in.to(images.device(), at::kDouble).contiguous();
  return launch_warp<false>(images, matrix, fill, matrix.size(0), out_h, out_w, "warp_affine");
}

at::Tensor warp_coords_cuda(const at::Tensor& images_in, const at::Tensor& coords_in, const at::Tensor& fill_in) {
  TORCH_CHECK(images_in.dim() == 4, "warp_coords: images must be [B, C, H, W], got ", images_in.dim(), " dims");
  TORCH_CHECK(coords_in.dim() == 4 && coords_in.size(3) == 2, "warp_coords: coords must be [P, Ho, Wo, 2], got shape ",
              coords_in.sizes());
  const c10::cuda::CUDAGuard guard(images_in.device());
  const auto images = images_in.contiguous();
  const auto coords = coords_in.to(images.device(), at::kDouble).contiguous();
  const auto fill = fill_in.to(images.device(), at::kDouble).contiguous();
  return launch_warp<true>(images, coords, fill, coords.size(0), coords.size(1), coords.size(2), "warp_coords");
}

// ------------------------------------------------------------------------------------------------
// fused policy views

using namespace views;

struct ViewPtrs {
  const float* mat;
  const bool* jit;
  const float* fac;
  const int64_t* ord;
  const bool* gray;
  const bool* blur;
  const double* sigma;
  const bool* sol;
  const float* mean;
  const float* stdv;
  float threshold;
  int64_t H, W, Ho, Wo;
};

// Stage A: sums[b] += luma of the warped pixel after the jitter ops before contrast (grid.y = image).
template <typename T>
__global__ void views_mean_kernel(const T* __restrict__ src, ViewPtrs q, double* __restrict__ sums) {
  __shared__ double red[kWarpsPerBlock];
  const int64_t b = blockIdx.y;
  if (!q.jit[b]) return;  // uniform over the block
  const float* m = q.mat + b * 6;
  const T* s = src + b * 3 * q.H * q.W;
  const int64_t n = q.Ho * q.Wo;
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t y = i / q.Wo, x = i % q.Wo;
    float rgb[3];
    sample_rgb(s, q.H, q.W, m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5], rgb);
    if (jitter_prefix(q.ord + b * 4, q.fac + b * 4, rgb)) acc += luma(rgb[0], rgb[1], rgb[2]);
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) atomicAdd(sums + b, acc);
}

// Stage B: warp + jitter + grayscale per pixel; to the float scratch (blur follows) or, with the
// epilogue, straight to the output (grid.y = image).
template <typename T, typename O>
__global__ void views_pointwise_kernel(const T* __restrict__ src, ViewPtrs q, const double* __restrict__ sums,
                                       float* __restrict__ scratch, O* __restrict__ out, OutLayout lay) {
  const int64_t b = blockIdx.y;
  const int64_t n = q.Ho * q.Wo;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t y = i / q.Wo, x = i % q.Wo;
  const float* m = q.mat + b * 6;
  float rgb[3];
  sample_rgb(src + b * 3 * q.H * q.W, q.H, q.W, m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5], rgb);
  const bool j = q.jit != nullptr && q.jit[b];
  const float gm = j ? static_cast<float>(sums[b] / static_cast<double>(n)) : 0.f;
  colour_chain(j, j ? q.ord + b * 4 : nullptr, j ? q.fac + b * 4 : nullptr, gm, q.gray != nullptr && q.gray[b], rgb);
  if (scratch != nullptr) {
    for (int c = 0; c < 3; ++c) scratch[(b * 3 + c) * n + i] = rgb[c];
  } else {
    const bool sol = q.sol != nullptr && q.sol[b];
    for (int c = 0; c < 3; ++c) out[lay.at(b, c, y, x)] = static_cast<O>(epilogue(rgb[c], sol, q.threshold, q.mean[c], q.stdv[c]));
  }
}

// The normalised float taps of image b in shared memory (built by the block); returns the radius.
__device__ int64_t block_taps(const ViewPtrs& q, int64_t b, double* w, float* k) {
  const bool on = q.blur[b];
  const double sigma = q.sigma[b];
  const int64_t maxr = (q.Ho < q.Wo ? q.Ho : q.Wo) - 1;
  const int64_t R = on ? blur_radius(sigma, maxr) : 0;
  for (int64_t t = threadIdx.x; t <= 2 * R; t += blockDim.x) w[t] = R == 0 ? 1.0 : gauss_tap(sigma, t - R);
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0.0;
    for (int64_t t = 0; t <= 2 * R; ++t) sum += w[t];
    for (int64_t t = 0; t <= 2 * R; ++t) k[t] = static_cast<float>(w[t] / sum);
  }
  __syncthreads();
  return R;
}

// The taps of image b in dynamic shared memory: doubles for the build, then the normalised floats.
struct Taps {
  const float* k;
  int64_t R;
};

__device__ Taps image_taps(const ViewPtrs& q, int64_t b, double* smem) {
  const int64_t maxk = 2 * ((q.Ho < q.Wo ? q.Ho : q.Wo) - 1) + 1;
  float* k = reinterpret_cast<float*>(smem + maxk);
  return {k, block_taps(q, b, smem, k)};
}

// Stage C: horizontal Gaussian pass, reflect padding (grid.y = image).
__global__ void views_hblur_kernel(const float* __restrict__ scratch, ViewPtrs q, float* __restrict__ scratch2) {
  extern __shared__ double smem[];
  const int64_t b = blockIdx.y;
  const Taps tp = image_taps(q, b, smem);
  const float* k = tp.k;
  const int64_t R = tp.R;
  const int64_t n = q.Ho * q.Wo;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t y = i / q.Wo, x = i % q.Wo;
  for (int c = 0; c < 3; ++c) {
    const float* row = scratch + (b * 3 + c) * n + y * q.Wo;
    float acc = 0.f;
    for (int64_t t = -R; t <= R; ++t) acc += k[t + R] * row[reflect(x + t, q.Wo)];
    scratch2[(b * 3 + c) * n + i] = acc;
  }
}

// Stage D: vertical Gaussian pass + solarize + normalise + store (grid.y = image).
template <typename O>
__global__ void views_vblur_kernel(const float* __restrict__ scratch2, ViewPtrs q, O* __restrict__ out, OutLayout lay) {
  extern __shared__ double smem[];
  const int64_t b = blockIdx.y;
  const Taps tp = image_taps(q, b, smem);
  const float* k = tp.k;
  const int64_t R = tp.R;
  const int64_t n = q.Ho * q.Wo;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t y = i / q.Wo, x = i % q.Wo;
  const bool sol = q.sol != nullptr && q.sol[b];
  for (int c = 0; c < 3; ++c) {
    const float* plane = scratch2 + (b * 3 + c) * n;
    float acc = 0.f;
    for (int64_t t = -R; t <= R; ++t) acc += k[t + R] * plane[reflect(y + t, q.Ho) * q.Wo + x];
    out[lay.at(b, c, y, x)] = static_cast<O>(epilogue(acc, sol, q.threshold, q.mean[c], q.stdv[c]));
  }
}

template <typename T, typename O>
void run_views(const ViewArgs& a, at::Tensor& out, bool channels_last) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const OutLayout lay{a.Ho, a.Wo, channels_last};
  ViewPtrs q{};
  q.mat = a.matrix.data_ptr<float>();
  q.jit = a.jitter.defined() ? a.jitter.data_ptr<bool>() : nullptr;
  q.fac = a.jitter.defined() ? a.factors.data_ptr<float>() : nullptr;
  q.ord = a.jitter.defined() ? a.order.data_ptr<int64_t>() : nullptr;
  q.gray = a.gray.defined() ? a.gray.data_ptr<bool>() : nullptr;
  q.blur = a.blur.defined() ? a.blur.data_ptr<bool>() : nullptr;
  q.sigma = a.blur.defined() ? a.sigma.data_ptr<double>() : nullptr;
  q.sol = a.solarize.defined() ? a.solarize.data_ptr<bool>() : nullptr;
  q.mean = a.mean.data_ptr<float>();
  q.stdv = a.std.data_ptr<float>();
  q.threshold = a.threshold;
  q.H = a.H;
  q.W = a.W;
  q.Ho = a.Ho;
  q.Wo = a.Wo;
  const T* src = a.images.data_ptr<T>();
  O* o = reinterpret_cast<O*>(out.data_ptr());
  const int64_t n = a.Ho * a.Wo;
  const unsigned bx = blocks_for(n);
  const dim3 grid(bx, static_cast<unsigned>(a.B));

  at::Tensor sums;
  if (a.jitter.defined()) {
    sums = at::zeros({a.B}, a.images.options().dtype(at::kDouble));
    const dim3 mgrid(std::max<unsigned>(1u, std::min<unsigned>(bx, 16u)), static_cast<unsigned>(a.B));
    views_mean_kernel<T><<<mgrid, kThreads, 0, stream>>>(src, q, sums.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const double* sp = sums.defined() ? sums.data_ptr<double>() : nullptr;
  if (!a.blur.defined()) {
    views_pointwise_kernel<T, O><<<grid, kThreads, 0, stream>>>(src, q, sp, nullptr, o, lay);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  auto scratch = at::empty({a.B, 3, a.Ho, a.Wo}, a.images.options().dtype(at::kFloat));
  auto scratch2 = at::empty_like(scratch);
  views_pointwise_kernel<T, O><<<grid, kThreads, 0, stream>>>(src, q, sp, scratch.data_ptr<float>(), nullptr, lay);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const int64_t maxk = 2 * (std::min(a.Ho, a.Wo) - 1) + 1;
  const size_t shmem = static_cast<size_t>(maxk) * (sizeof(double) + sizeof(float));
  TORCH_CHECK(shmem <= 48 * 1024, "augment_views (CUDA): blur on outputs larger than 2047 px per side is not supported");
  views_hblur_kernel<<<grid, kThreads, shmem, stream>>>(scratch.data_ptr<float>(), q, scratch2.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  views_vblur_kernel<O><<<grid, kThreads, shmem, stream>>>(scratch2.data_ptr<float>(), q, o, lay);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor augment_views_cuda(const at::Tensor& images, const at::Tensor& matrix, int64_t out_h, int64_t out_w,
                              const c10::optional<at::Tensor>& jitter, const at::Tensor& factors,
                              const at::Tensor& order, const c10::optional<at::Tensor>& grayscale,
                              const c10::optional<at::Tensor>& blur, const at::Tensor& sigma,
                              const c10::optional<at::Tensor>& solarize, double threshold, const at::Tensor& mean,
                              const at::Tensor& std, at::ScalarType dtype, bool channels_last) {
  const c10::cuda::CUDAGuard guard(images.device());
  // the checks read shapes only: no host synchronisation (the order rows are trusted to be permutations;
  // the Python wrapper builds them with argsort)
  ViewArgs a = prepare_view_args(images, matrix, out_h, out_w, jitter, factors, order, grayscale,
                                 blur, sigma, solarize, mean, std, dtype);
  a.threshold = static_cast<float>(threshold);
  at::Tensor out = new_view_output(a, channels_last);
  if (a.B == 0) return out;
  TORCH_CHECK(a.B <= 65535, "augment_views (CUDA): at most 65535 images per call, got ", a.B);
  const bool u8 = a.images.scalar_type() == at::kByte;
  if (dtype == at::kFloat) {
    if (u8) run_views<uint8_t, float>(a, out, channels_last); else run_views<float, float>(a, out, channels_last);
  } else {
    if (u8) run_views<uint8_t, c10::BFloat16>(a, out, channels_last);
    else run_views<float, c10::BFloat16>(a, out, channels_last);
  }
  return out;
}

}  // namespace
}  // namespace augment
}  // namespace invfast

TORCH_LIBRARY_IMPL(invfast, CUDA, m) {
  m.impl("warp_affine", &invfast::augment::warp_affine_cuda);
  m.impl("warp_coords", &invfast::augment::warp_coords_cuda);
  m.impl("augment_views", &invfast::augment::augment_views_cuda);
}
