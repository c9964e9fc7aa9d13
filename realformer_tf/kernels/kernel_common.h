// What the fused kernels here share: TensorFlow's op-kernel names and the CPU thread pool.

#ifndef REALFORMER_TF_KERNELS_KERNEL_COMMON_H_
#define REALFORMER_TF_KERNELS_KERNEL_COMMON_H_

#include <cstdint>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"

namespace realformer_tf {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Runs fn(begin, end) over [0, total) on the op's CPU thread pool, in shards sized by
// `cost_per_unit` (roughly nanoseconds per unit of work).
template <typename Fn>
inline void ParallelFor(OpKernelContext* ctx, int64_t total, int64_t cost_per_unit, Fn fn) {
  ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(
      total, ::tsl::thread::ThreadPool::SchedulingParams::Adaptive(cost_per_unit), fn);
}

}  // namespace realformer_tf

#endif  // REALFORMER_TF_KERNELS_KERNEL_COMMON_H_
