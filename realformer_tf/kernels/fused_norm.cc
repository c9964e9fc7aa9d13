// Fused LayerNorm kernels for TensorFlow on CPU (see realformer_tf/kernels/__init__.py).
//
// Each op is one pass per row over a [rows, width] view of its input (statistics of a
// row stay in L1 between the two loops), where TensorFlow runs a LayerNorm as a chain
// of separate elementwise and reduction ops, each a full pass over memory.
//
//   RealformerStandardize(x)              -> xhat = (x - mean) * rstd, rstd [rows, 1]
//   RealformerLayerNorm(x, gamma, beta)   -> y = xhat * gamma + beta, xhat, rstd
//   RealformerGeluStandardize(x)          -> standardize(gelu(x)), rstd, gelu'(x)
//   RealformerStandardizeGrad(dxhat, xhat, rstd, slope?)
//       -> dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) [* slope]
//   RealformerLayerNormGrad(dy, xhat, rstd, gamma) -> dx, dgamma, dbeta
//
// gelu is BERT's tanh form written as x * sigmoid(2u), u = C (x + K x^3), as in
// realformer_tf/layers/activations.py.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel_common.h"

namespace realformer_tf {
namespace {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluK = 0.044715f;

// exp(v) for float, written so that the compiler vectorizes it (std::exp stays a scalar
// call without -ffast-math, which a shared library must not use): v = n ln2 + r,
// |r| <= ln2 / 2, exp(r) by its degree-6 Taylor polynomial (relative error < 2e-7
// there), times 2^n built in the exponent bits. The clamp keeps 2^n a normal float.
inline float VectorExp(float v) {
  v = v < -87.f ? -87.f : (v > 88.f ? 88.f : v);  // not fmin/fmax: they do not vectorize
  const float n = std::floor(v * 1.4426950408889634f + 0.5f);
  const float r = (v - n * 0.693145751953125f) - n * 1.428606765330187e-06f;  // ln2 in two parts
  float p = 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  return p * __builtin_bit_cast(float, (static_cast<int32_t>(n) + 127) << 23);
}

// a = gelu(x) = x * s and slope = gelu'(x) = s + x * s (1 - s) * 2C (1 + 3K x^2), with
// s = sigmoid(2u), u = C (x + K x^3).
inline void GeluRow(const float* __restrict x, int64_t width, float* __restrict a,
                    float* __restrict slope) {
#pragma omp simd
  for (int64_t j = 0; j < width; ++j) {
    const float v = x[j];
    const float v2 = v * v;
    const float s = 1.f / (1.f + VectorExp(-v * (v2 * (2 * kGeluC * kGeluK) + 2 * kGeluC)));
    a[j] = v * s;
    slope[j] = s + v * (v2 * (6 * kGeluC * kGeluK) + 2 * kGeluC) * s * (1.f - s);
  }
}

// Input shape with its last dimension set to 1: the per-row statistic.
Status RowStatShape(InferenceContext* c, int input, int output) {
  ShapeHandle rows;
  TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(input), -1, c->MakeDim(1), &rows));
  c->set_output(output, rows);
  return Status();
}

// Runs fn(first_row, end_row, worker) over the rows on the op's CPU thread pool.
template <typename Fn>
void ForRows(OpKernelContext* ctx, int64_t rows, int64_t width, int64_t cost_per_value, Fn fn) {
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  pool->ParallelForWithWorkerId(
      rows, ::tsl::thread::ThreadPool::SchedulingParams::Adaptive(width * cost_per_value), fn);
}

int NumWorkers(OpKernelContext* ctx) {
  return ctx->device()->tensorflow_cpu_worker_threads()->workers->NumThreads() + 1;
}

// Mean and 1 / sqrt(variance + epsilon) of one row (two passes; the row stays in cache).
inline void RowMoments(const float* x, int64_t width, float epsilon, float* mean, float* rstd) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < width; ++j) sum += x[j];
  const float m = sum / width;
  float squares = 0.f;
#pragma omp simd reduction(+ : squares)
  for (int64_t j = 0; j < width; ++j) squares += (x[j] - m) * (x[j] - m);
  *mean = m;
  *rstd = 1.f / std::sqrt(squares / width + epsilon);
}

// The [rows, width] view of `t`: width is its last dimension.
Status RowsAndWidth(const Tensor& t, int64_t* rows, int64_t* width) {
  if (t.dims() < 1) {
    return ::tensorflow::errors::InvalidArgument("needs a tensor of rank >= 1, got shape ",
                                                 t.shape().DebugString());
  }
  *width = t.dim_size(t.dims() - 1);
  *rows = *width == 0 ? 0 : t.NumElements() / *width;
  return Status();
}

// gamma / beta: a vector of the rows' width.
Status CheckVector(const Tensor& t, int64_t width, const char* name) {
  if (t.dims() == 1 && t.dim_size(0) == width) return Status();
  return ::tensorflow::errors::InvalidArgument(name, " must have shape [", width, "], got ",
                                               t.shape().DebugString());
}

TensorShape RowStatTensorShape(const Tensor& t) {
  TensorShape shape = t.shape();
  shape.set_dim(shape.dims() - 1, 1);
  return shape;
}

// ---------------------------------------------------------------- forward ops

REGISTER_OP("RealformerStandardize")
    .Input("x: float")
    .Attr("epsilon: float")
    .Output("xhat: float")
    .Output("rstd: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return RowStatShape(c, 0, 1);
    });

REGISTER_OP("RealformerLayerNorm")
    .Input("x: float")
    .Input("gamma: float")
    .Input("beta: float")
    .Attr("epsilon: float")
    .Output("y: float")
    .Output("xhat: float")
    .Output("rstd: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(0));
      return RowStatShape(c, 0, 2);
    });

REGISTER_OP("RealformerGeluStandardize")
    .Input("x: float")
    .Attr("epsilon: float")
    .Output("xhat: float")
    .Output("rstd: float")
    .Output("slope: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(2, c->input(0));
      return RowStatShape(c, 0, 1);
    });

// The three forward ops share one kernel: `kGelu` applies gelu first (and writes its
// slope), `kAffine` applies gamma and beta after.
template <bool kGelu, bool kAffine>
class StandardizeOp : public OpKernel {
 public:
  explicit StandardizeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    int64_t rows = 0, width = 0;
    OP_REQUIRES_OK(ctx, RowsAndWidth(x, &rows, &width));
    const float* gamma = nullptr;
    const float* beta = nullptr;
    if (kAffine) {
      OP_REQUIRES_OK(ctx, CheckVector(ctx->input(1), width, "gamma"));
      OP_REQUIRES_OK(ctx, CheckVector(ctx->input(2), width, "beta"));
      gamma = ctx->input(1).flat<float>().data();
      beta = ctx->input(2).flat<float>().data();
    }
    int out = 0;
    Tensor* y = nullptr;
    Tensor* xhat = nullptr;
    Tensor* rstd = nullptr;
    Tensor* slope = nullptr;
    if (kAffine) OP_REQUIRES_OK(ctx, ctx->allocate_output(out++, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(out++, x.shape(), &xhat));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(out++, RowStatTensorShape(x), &rstd));
    if (kGelu) OP_REQUIRES_OK(ctx, ctx->allocate_output(out++, x.shape(), &slope));

    const float* in = x.flat<float>().data();
    float* y_out = kAffine ? y->flat<float>().data() : nullptr;
    float* xhat_out = xhat->flat<float>().data();
    float* rstd_out = rstd->flat<float>().data();
    float* slope_out = kGelu ? slope->flat<float>().data() : nullptr;
    if (width == 0) {
      // Zero-width rows: their mean and variance are 0/0, NaN as with TensorFlow's ops
      // (rstd still has one value per leading position, which must not stay uninitialized).
      std::fill(rstd_out, rstd_out + rstd->NumElements(), std::numeric_limits<float>::quiet_NaN());
      return;
    }
    const float epsilon = epsilon_;
    ForRows(ctx, rows, width, kGelu ? 30 : 8, [&](int64_t begin, int64_t end, int) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t offset = r * width;
        const float* row = in + offset;
        float* xh = xhat_out + offset;
        if (kGelu) {
          GeluRow(row, width, xh, slope_out + offset);
          row = xh;
        }
        float mean, r_std;
        RowMoments(row, width, epsilon, &mean, &r_std);
        rstd_out[r] = r_std;
#pragma omp simd
        for (int64_t j = 0; j < width; ++j) xh[j] = (row[j] - mean) * r_std;
        if (kAffine) {
          float* yr = y_out + offset;
#pragma omp simd
          for (int64_t j = 0; j < width; ++j) yr[j] = xh[j] * gamma[j] + beta[j];
        }
      }
    });
  }

 private:
  float epsilon_;
};

REGISTER_KERNEL_BUILDER(Name("RealformerStandardize").Device(DEVICE_CPU),
                        StandardizeOp<false, false>);
REGISTER_KERNEL_BUILDER(Name("RealformerLayerNorm").Device(DEVICE_CPU), StandardizeOp<false, true>);
REGISTER_KERNEL_BUILDER(Name("RealformerGeluStandardize").Device(DEVICE_CPU),
                        StandardizeOp<true, false>);

// ---------------------------------------------------------------- backward ops

REGISTER_OP("RealformerStandardizeGrad")
    .Input("dxhat: float")
    .Input("xhat: float")
    .Input("rstd: float")
    .Input("slope: float")  // [0]-shaped for none; else multiplies dx (gelu's chain rule)
    .Output("dx: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return Status();
    });

REGISTER_OP("RealformerLayerNormGrad")
    .Input("dy: float")
    .Input("xhat: float")
    .Input("rstd: float")
    .Input("gamma: float")
    .Output("dx: float")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(3));
      c->set_output(2, c->input(3));
      return Status();
    });

// dx of one row from g = dxhat (or dy * gamma): rstd * (g - mean(g) - xhat * mean(g * xhat)).
inline void RowStandardizeGrad(const float* g, const float* xh, float r_std, const float* slope,
                               int64_t width, float* dx) {
  float sum_g = 0.f, sum_gx = 0.f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
  for (int64_t j = 0; j < width; ++j) {
    sum_g += g[j];
    sum_gx += g[j] * xh[j];
  }
  const float mean_g = sum_g / width;
  const float mean_gx = sum_gx / width;
  if (slope != nullptr) {
#pragma omp simd
    for (int64_t j = 0; j < width; ++j)
      dx[j] = r_std * (g[j] - mean_g - xh[j] * mean_gx) * slope[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) dx[j] = r_std * (g[j] - mean_g - xh[j] * mean_gx);
  }
}

Status CheckSameShape(const Tensor& a, const Tensor& b, const char* name) {
  if (a.shape() == b.shape()) return Status();
  return ::tensorflow::errors::InvalidArgument(name, " must have shape ", a.shape().DebugString(),
                                               ", got ", b.shape().DebugString());
}

// The inputs both gradient ops share: upstream (0), xhat (1) and rstd (2), as the
// forward op wrote them. Sets the [rows, width] view of the upstream gradient.
Status CheckGradInputs(OpKernelContext* ctx, int64_t* rows, int64_t* width) {
  TF_RETURN_IF_ERROR(RowsAndWidth(ctx->input(0), rows, width));
  TF_RETURN_IF_ERROR(CheckSameShape(ctx->input(0), ctx->input(1), "xhat"));
  if (ctx->input(2).NumElements() == *rows) return Status();
  return ::tensorflow::errors::InvalidArgument("rstd must have ", *rows, " values, got ",
                                               ctx->input(2).NumElements());
}

class StandardizeGradOp : public OpKernel {
 public:
  explicit StandardizeGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dxhat = ctx->input(0);
    const Tensor& xhat = ctx->input(1);
    const Tensor& slope = ctx->input(3);
    int64_t rows = 0, width = 0;
    OP_REQUIRES_OK(ctx, CheckGradInputs(ctx, &rows, &width));
    const bool has_slope = slope.NumElements() > 0;
    if (has_slope) OP_REQUIRES_OK(ctx, CheckSameShape(dxhat, slope, "slope"));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, dxhat.shape(), &dx));
    const float* g = dxhat.flat<float>().data();
    const float* xh = xhat.flat<float>().data();
    const float* r_std = ctx->input(2).flat<float>().data();
    const float* sl = has_slope ? slope.flat<float>().data() : nullptr;
    float* out = dx->flat<float>().data();
    ForRows(ctx, rows, width, 8, [&](int64_t begin, int64_t end, int) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t o = r * width;
        RowStandardizeGrad(g + o, xh + o, r_std[r], sl ? sl + o : nullptr, width, out + o);
      }
    });
  }
};

REGISTER_KERNEL_BUILDER(Name("RealformerStandardizeGrad").Device(DEVICE_CPU), StandardizeGradOp);

class LayerNormGradOp : public OpKernel {
 public:
  explicit LayerNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& xhat = ctx->input(1);
    const Tensor& gamma_t = ctx->input(3);
    int64_t rows = 0, width = 0;
    OP_REQUIRES_OK(ctx, CheckGradInputs(ctx, &rows, &width));
    OP_REQUIRES_OK(ctx, CheckVector(gamma_t, width, "gamma"));
    Tensor *dx = nullptr, *dgamma = nullptr, *dbeta = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, dy.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, gamma_t.shape(), &dgamma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, gamma_t.shape(), &dbeta));

    // Per-worker partial sums of dgamma and dbeta, in double, added up after.
    const int workers = NumWorkers(ctx);
    std::vector<double> partial(static_cast<size_t>(workers) * 2 * width, 0.0);
    const float* d = dy.flat<float>().data();
    const float* xh = xhat.flat<float>().data();
    const float* r_std = ctx->input(2).flat<float>().data();
    const float* gamma = gamma_t.flat<float>().data();
    float* out = dx->flat<float>().data();
    ForRows(ctx, rows, width, 12, [&](int64_t begin, int64_t end, int worker) {
      std::vector<float> g(width);
      double* pg = partial.data() + static_cast<size_t>(worker) * 2 * width;
      double* pb = pg + width;
      for (int64_t r = begin; r < end; ++r) {
        const int64_t o = r * width;
        for (int64_t j = 0; j < width; ++j) {
          g[j] = d[o + j] * gamma[j];
          pg[j] += d[o + j] * xh[o + j];
          pb[j] += d[o + j];
        }
        RowStandardizeGrad(g.data(), xh + o, r_std[r], nullptr, width, out + o);
      }
    });
    float* dg = dgamma->flat<float>().data();
    float* db = dbeta->flat<float>().data();
    for (int64_t j = 0; j < width; ++j) {
      double sg = 0.0, sb = 0.0;
      for (int w = 0; w < workers; ++w) {
        sg += partial[static_cast<size_t>(w) * 2 * width + j];
        sb += partial[static_cast<size_t>(w) * 2 * width + width + j];
      }
      dg[j] = static_cast<float>(sg);
      db[j] = static_cast<float>(sb);
    }
  }
};

REGISTER_KERNEL_BUILDER(Name("RealformerLayerNormGrad").Device(DEVICE_CPU), LayerNormGradOp);

}  // namespace
}  // namespace realformer_tf
