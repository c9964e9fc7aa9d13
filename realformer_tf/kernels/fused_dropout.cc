// Fused dropout for TensorFlow on CPU (see realformer_tf/kernels/__init__.py).
//
//   RealformerDropout(x, seed[2], rate) -> y = keep ? x * (1 / (1 - rate)) : 0
//
// TensorFlow's dropout is four passes over memory (draw a uniform tensor with Philox,
// compare it with the rate, scale, select) and keeps the mask for the backward pass.
// Here the mask of element i is a pure function of (seed, i), drawn where it is used:
//
//   key  = Mix64(Mix64(seed[0] + G) + seed[1])
//   keep = (Mix64(key + (i + 1) G) >> 32) >= round(rate * 2^32),   G = 0x9E3779B97F4A7C15
//
// i.e. the SplitMix64 generator started at `key` (Mix64 is its output function), one
// value per element, so shards of any size draw the same mask. The gradient is this op
// applied to dy with the same seed: the backward pass stores nothing and takes one pass.
// The scale is 1 / (1 - rate) rounded to float once, as TensorFlow's dropout does, so
// kept values are bit-identical to it.

#include <cmath>
#include <cstdint>

#include "kernel_common.h"

namespace realformer_tf {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijective 64-bit mix.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Elements [begin, end) of the flat tensor. Scaling every value and then selecting
// (rather than loading only kept ones) lets the loop vectorize and drops NaNs and
// infinities to 0 as TensorFlow's select does.
void DropoutRange(const float* __restrict in, float* __restrict out, int64_t begin, int64_t end,
                  uint64_t key, uint64_t threshold, float scale) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const uint64_t bits = Mix64(key + static_cast<uint64_t>(i + 1) * kGolden);
    const float scaled = in[i] * scale;
    out[i] = (bits >> 32) >= threshold ? scaled : 0.f;
  }
}

REGISTER_OP("RealformerDropout")
    .Input("x: float")
    .Input("seed: int64")
    .Attr("rate: float")
    .Output("y: float")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape);

class DropoutOp : public OpKernel {
 public:
  explicit DropoutOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    float rate = 0.f;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate));
    OP_REQUIRES(ctx, rate >= 0.f && rate < 1.f,
                ::tensorflow::errors::InvalidArgument("rate must be in [0, 1), got ", rate));
    const double threshold = std::round(static_cast<double>(rate) * 4294967296.0);
    threshold_ = threshold > 4294967295.0 ? 4294967295ull : static_cast<uint64_t>(threshold);
    scale_ = static_cast<float>(1.0 / (1.0 - static_cast<double>(rate)));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& seed = ctx->input(1);
    OP_REQUIRES(ctx, seed.dims() == 1 && seed.dim_size(0) == 2,
                ::tensorflow::errors::InvalidArgument("seed must have shape [2], got ",
                                                      seed.shape().DebugString()));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    const auto words = seed.flat<int64_t>();
    const uint64_t key =
        Mix64(Mix64(static_cast<uint64_t>(words(0)) + kGolden) + static_cast<uint64_t>(words(1)));
    const float* in = x.flat<float>().data();
    float* out = y->flat<float>().data();
    const uint64_t threshold = threshold_;
    const float scale = scale_;
    ParallelFor(ctx, x.NumElements(), 4, [&](int64_t begin, int64_t end) {
      DropoutRange(in, out, begin, end, key, threshold, scale);
    });
  }

 private:
  uint64_t threshold_;
  float scale_;
};

REGISTER_KERNEL_BUILDER(Name("RealformerDropout").Device(DEVICE_CPU), DropoutOp);

}  // namespace
}  // namespace realformer_tf
