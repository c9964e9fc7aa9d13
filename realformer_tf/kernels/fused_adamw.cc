// Fused AdamW update for TensorFlow on CPU (see realformer_tf/kernels/__init__.py).
//
//   RealformerApplyAdamW(var, m, v, grad, grad_scale, lr, beta1, beta2, epsilon,
//                        beta1_power, beta2_power, decay)
//
// for every element, in one pass over the variable, its two slots and the gradient:
//
//   g   = grad * grad_scale                      (the training loop's clip / replica share)
//   var = var - decay * var                      (decoupled weight decay, decay = lr * wd)
//   m   = m + (g - m) * (1 - beta1)
//   v   = v + (g^2 - v) * (1 - beta2)
//   var = var - m * alpha / (sqrt(v) + epsilon), alpha = lr sqrt(1 - beta2_power) / (1 - beta1_power)
//
// which is what the three passes it replaces compute (a multiply of the gradient,
// ResourceApplyGradientDescent with delta = var, ResourceApplyAdam), in their order:
// Keras' AdamW decays before its Adam step. The three variables are locked in address
// order and copied first if a reader still holds their buffer, as TensorFlow's own
// training ops do.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

#include "kernel_common.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace realformer_tf {
namespace {

using ::tensorflow::Var;

constexpr int kNumVariables = 3;  // var, m, v
constexpr const char* kScalarNames[] = {"grad_scale", "lr", "beta1", "beta2", "epsilon",
                                        "beta1_power", "beta2_power", "decay"};

REGISTER_OP("RealformerApplyAdamW")
    .Input("var: resource")
    .Input("m: resource")
    .Input("v: resource")
    .Input("grad: float")
    .Input("grad_scale: float")
    .Input("lr: float")
    .Input("beta1: float")
    .Input("beta2: float")
    .Input("epsilon: float")
    .Input("beta1_power: float")
    .Input("beta2_power: float")
    .Input("decay: float")
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs);

struct Hyper {
  float grad_scale, lr, beta1, beta2, epsilon, beta1_power, beta2_power, decay;
};

void AdamWRange(float* __restrict var, float* __restrict m, float* __restrict v,
                const float* __restrict grad, int64_t begin, int64_t end, const Hyper& h) {
  const float alpha = h.lr * std::sqrt(1.f - h.beta2_power) / (1.f - h.beta1_power);
  const float keep1 = 1.f - h.beta1, keep2 = 1.f - h.beta2;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float g = grad[i] * h.grad_scale;
    const float w = var[i] - h.decay * var[i];
    const float mi = m[i] + (g - m[i]) * keep1;
    const float vi = v[i] + (g * g - v[i]) * keep2;
    m[i] = mi;
    v[i] = vi;
    var[i] = w - mi * alpha / (std::sqrt(vi) + h.epsilon);
  }
}

// The variable's buffer, copied first if another tensor still shares it (a pending
// read), so that the update never changes a value someone else already read.
Status MakeWritable(OpKernelContext* ctx, Var* variable) {
  Tensor* tensor = variable->tensor();
  if (!variable->copy_on_read_mode.load() && tensor->RefCountIsOne()) return Status();
  Tensor copy;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(tensor->dtype(), tensor->shape(), &copy));
  std::memcpy(copy.data(), tensor->data(), tensor->TotalBytes());
  *tensor = copy;
  return Status();
}

class ApplyAdamWOp : public OpKernel {
 public:
  explicit ApplyAdamWOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(3);
    Hyper h;
    float* fields[] = {&h.grad_scale, &h.lr, &h.beta1, &h.beta2, &h.epsilon,
                       &h.beta1_power, &h.beta2_power, &h.decay};
    static_assert(std::size(fields) == std::size(kScalarNames), "one name per scalar input");
    for (int k = 0; k < static_cast<int>(std::size(fields)); ++k) {
      const Tensor& t = ctx->input(4 + k);
      OP_REQUIRES(ctx, t.NumElements() == 1 && t.dims() == 0,
                  ::tensorflow::errors::InvalidArgument(kScalarNames[k], " must be a scalar, got ",
                                                        t.shape().DebugString()));
      *fields[k] = t.scalar<float>()();
    }
    ::tensorflow::core::RefCountPtr<Var> variables[kNumVariables];
    for (int i = 0; i < kNumVariables; ++i) {
      OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, i), &variables[i]));
    }
    // Address order, each mutex once: two updates sharing variables cannot deadlock.
    std::vector<::tsl::mutex*> mutexes;
    for (auto& variable : variables) mutexes.push_back(variable->mu());
    std::sort(mutexes.begin(), mutexes.end());
    mutexes.erase(std::unique(mutexes.begin(), mutexes.end()), mutexes.end());
    std::vector<::tsl::mutex_lock> locks;
    locks.reserve(mutexes.size());
    for (auto* mu : mutexes) locks.emplace_back(*mu);

    static const char* kNames[] = {"var", "m", "v"};
    float* data[kNumVariables];
    for (int i = 0; i < kNumVariables; ++i) {
      Var* variable = variables[i].get();
      OP_REQUIRES(ctx, variable->is_initialized && variable->tensor()->dtype() == ::tensorflow::DT_FLOAT,
                  ::tensorflow::errors::FailedPrecondition(kNames[i], " must be an initialized float32 variable"));
      OP_REQUIRES(ctx, variable->tensor()->shape() == grad.shape(),
                  ::tensorflow::errors::InvalidArgument(
                      kNames[i], " and grad must have the same shape, got ",
                      variable->tensor()->shape().DebugString(), " and ", grad.shape().DebugString()));
      OP_REQUIRES_OK(ctx, MakeWritable(ctx, variable));
      data[i] = variable->tensor()->flat<float>().data();
    }
    const float* g = grad.flat<float>().data();
    ParallelFor(ctx, grad.NumElements(), 16, [&](int64_t begin, int64_t end) {
      AdamWRange(data[0], data[1], data[2], g, begin, end, h);
    });
  }
};

REGISTER_KERNEL_BUILDER(Name("RealformerApplyAdamW").Device(DEVICE_CPU), ApplyAdamWOp);

}  // namespace
}  // namespace realformer_tf
