// The luma weights of every compiled colour kernel: invfast.constants.LUMA_WEIGHTS (ITU-R 601-2, as
// torchvision's rgb_to_grayscale) rounded to float32, as torch rounds a Python float multiplying a float32
// plane. One copy for the CPU and CUDA kernels (tests/test_primitives.py checks it against the constants).
#pragma once

namespace invfast {
namespace color {

constexpr float kLumaR = 0.2989f, kLumaG = 0.587f, kLumaB = 0.114f;

}  // namespace color
}  // namespace invfast
