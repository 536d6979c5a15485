// Launchers of the data-movement CUDA kernels (ew_shape.cu) behind concat, split, slice,
// slice_backward and channel_shuffle. They move 4-byte elements without looking at them,
// so f32 and i32 share every kernel. (permute and transpose use launch_gather32 of
// ew_elementwise_launch.h.) Each enqueues on `stream` and returns at once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::cuda {

// launch_copy_along_dim32: src and dst are (outer, src_dim, inner) and (outer, dst_dim,
// inner); copies slabs [src_off, src_off + len) of src into [dst_off, dst_off + len) of dst.
void launch_copy_along_dim32(const void* src, int64_t src_dim, int64_t src_off, void* dst, int64_t dst_dim,
                             int64_t dst_off, int64_t outer, int64_t len, int64_t inner, cudaStream_t stream);

// launch_pad_along_dim32: dst (outer, dst_dim, inner) = zeros except [start, start + len)
// along the middle dim, which holds src (outer, len, inner). One pass, every element written.
void launch_pad_along_dim32(const void* src, int64_t len, void* dst, int64_t dst_dim, int64_t start,
                            int64_t outer, int64_t inner, cudaStream_t stream);

// launch_channel_shuffle32: x (n, c, inner) with c = groups * k; channel i * k + j of x
// becomes channel j * groups + i of y.
void launch_channel_shuffle32(const void* x, void* y, int64_t n, int64_t c, int64_t inner, int64_t groups,
                              cudaStream_t stream);

}  // namespace mtc::cuda
