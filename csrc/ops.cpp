// invfast._C: the library declaration and the Python module.
//
// The foundation ops (invariance scores, pairwise log-sum-exp) are declared here.
// Every other op family declares its own schemas next to its kernels with
// TORCH_LIBRARY_FRAGMENT(invfast, m) in csrc/<family>/<family>_ops.cpp, so that
// families can be added without touching this file.
#include <torch/extension.h>
#include <torch/library.h>

#include <string>

#include "common/cpu_isa.h"

#ifdef _OPENMP
#include <omp.h>
#endif

TORCH_LIBRARY(invfast, m) {
  // z_ref [N, D], z_t [N, P, D] (whitened, uncentred) and shift [D] -> (distance [N, P], cosine [N, P])
  // of a = z_ref[n] - shift and b = z_t[n, p] - shift. Taking the centring here keeps it out of the
  // whitening GEMM. Reductions accumulate in float64; outputs are float32 for half/bfloat16 inputs,
  // the input dtype otherwise.
  m.def("pair_scores(Tensor z_ref, Tensor z_t, Tensor shift) -> (Tensor, Tensor)");
  // rows [B, D], x [N, D] -> [B] float64: log sum_{j != row_offset + i} exp(-scale * ||rows_i - x_j||^2).
  m.def("sqdist_logsumexp(Tensor rows, Tensor x, int row_offset, float scale) -> Tensor");
}

static int openmp_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

static bool built_with_cuda() {
#ifdef WITH_CUDA
  return true;
#else
  return false;
#endif
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "invfast compiled core: ops are registered under torch.ops.invfast";
  m.def("openmp_threads", &openmp_threads, "OpenMP threads available to the compiled core");
  m.def("built_with_cuda", &built_with_cuda, "whether the CUDA kernels were compiled in");
  m.def("cpu_isa", [] { return std::string(invfast::cpu_isa_name(invfast::cpu_isa())); },
        "the instruction set the CPU kernels use: 'baseline', 'avx2' or 'avx512' (INVFAST_CPU_ISA lowers it)");
  m.def("cpu_isa_supported", [] { return std::string(invfast::cpu_isa_name(invfast::cpu_isa_supported())); },
        "the highest instruction set of this CPU the kernels have variants for");
}
