// Launcher of dropout's kernel (nn_dropout.cu). Plain C++: included by host code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::cuda {

// launch_dropout: y[i] = draw(seed, i) >= threshold ? x[i] * scale : 0 over n elements,
// draw being ops/dropout.h's dropout_draw (the same bits as the CPU kernel), threshold
// dropout_threshold(p) and scale 1 / (1 - p) computed in float by the caller.
void launch_dropout(const float* x, float* y, int64_t n, uint64_t seed, uint64_t threshold, float scale,
                    cudaStream_t stream);

}  // namespace mtc::cuda
