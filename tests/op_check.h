// The op-test harness. check_op runs an op through mtc (fp32, through the interpreter and
// autograd) and compares it with a reference written in double precision:
//  - forward: |mtc - ref| <= fwd_atol + fwd_rtol * |ref| elementwise;
//  - backward: for loss = sum(y * w) with random w, each input gradient against central
//    finite differences of the double reference (step fd_step), within grad_atol +
//    grad_rtol * |fd|.
// It prints the largest differences it saw. Integer inputs (labels, indices) are drawn
// in [0, int_max) and get no gradient check.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"

namespace mtc {

// make_test_runtime: a CPU runtime with a 512 MiB arena, made current.
inline std::unique_ptr<Runtime> make_test_runtime(bool synchronous = false, size_t memory = size_t{512} << 20) {
  RuntimeOptions o;
  o.memory_bytes = memory;
  o.num_threads = 2;
  o.synchronous = synchronous;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  return std::move(rt).value();
}

// RefTensor: a double-precision row-major tensor for references.
struct RefTensor {
  Shape shape;
  std::vector<double> v;
  RefTensor() = default;
  explicit RefTensor(Shape s) : shape(std::move(s)), v(static_cast<size_t>(numel(shape)), 0.0) {}
  int64_t offset(std::initializer_list<int64_t> idx) const {
    int64_t off = 0;
    size_t d = 0;
    for (int64_t i : idx) off = off * shape[d++] + i;
    return off;
  }
  double& at(std::initializer_list<int64_t> idx) { return v[offset(idx)]; }
  double at(std::initializer_list<int64_t> idx) const { return v[offset(idx)]; }
  int64_t dim(int i) const { return shape[i]; }
};

struct InputSpec {
  Shape shape;
  bool is_int = false;
  int int_max = 0;
  bool needs_grad = true;
  InputSpec(std::initializer_list<int64_t> s) : shape(s) {}
  InputSpec(Shape s) : shape(std::move(s)) {}
  static InputSpec ints(Shape s, int max) {
    InputSpec i(std::move(s));
    i.is_int = true;
    i.int_max = max;
    i.needs_grad = false;
    return i;
  }
  static InputSpec no_grad(Shape s) {
    InputSpec i(std::move(s));
    i.needs_grad = false;
    return i;
  }
};

struct CheckOptions {
  double fwd_atol = 1e-5, fwd_rtol = 1e-4;
  double grad_atol = 2e-3, grad_rtol = 2e-3;
  double fd_step = 1e-6;
  double avoid_zero = 0;  // keep |x| >= this (for kinks at 0)
  double lo = -1, hi = 1; // range of float inputs
  bool check_backward = true;
  uint32_t seed = 1234;
};

using MtcFn = std::function<Tensor(const TensorList&)>;
using RefFn = std::function<RefTensor(const std::vector<RefTensor>&)>;

inline void check_op(const std::vector<InputSpec>& specs, const MtcFn& fn, const RefFn& ref,
                     CheckOptions o = {}) {
  std::mt19937 gen(o.seed);
  std::uniform_real_distribution<float> uni(static_cast<float>(o.lo), static_cast<float>(o.hi));
  std::vector<RefTensor> rin;
  TensorList in;
  for (const InputSpec& s : specs) {
    RefTensor r(s.shape);
    if (s.is_int) {
      std::uniform_int_distribution<int> ui(0, s.int_max - 1);
      std::vector<int32_t> iv(r.v.size());
      for (size_t i = 0; i < iv.size(); ++i) r.v[i] = iv[i] = ui(gen);
      in.push_back(from_vector_i32(s.shape, iv));
    } else {
      std::vector<float> fv(r.v.size());
      for (size_t i = 0; i < fv.size(); ++i) {
        float x = uni(gen);
        if (std::abs(x) < o.avoid_zero) x = x < 0 ? x - static_cast<float>(o.avoid_zero) : x + static_cast<float>(o.avoid_zero);
        fv[i] = x;
        r.v[i] = x;
      }
      Tensor t = from_vector(s.shape, fv);
      if (s.needs_grad && o.check_backward) t.set_requires_grad(true);
      in.push_back(t);
    }
    rin.push_back(std::move(r));
  }
  Tensor y = fn(in);
  RefTensor ry = ref(rin);
  auto yv = y.to_vector();
  ASSERT_TRUE(yv.ok()) << yv.status();
  ASSERT_EQ(shape_str(y.shape()), shape_str(ry.shape)) << "output shape";
  ASSERT_EQ(yv->size(), ry.v.size());
  double max_fwd = 0;
  for (size_t i = 0; i < ry.v.size(); ++i) {
    const double d = std::abs((*yv)[i] - ry.v[i]);
    max_fwd = std::max(max_fwd, d);
    ASSERT_LE(d, o.fwd_atol + o.fwd_rtol * std::abs(ry.v[i])) << "forward element " << i << ": mtc "
        << (*yv)[i] << " ref " << ry.v[i];
  }
  std::printf("  forward: %zu elements, max |mtc - ref| = %.3g (tol %.1g + %.1g*|ref|)\n", ry.v.size(), max_fwd,
              o.fwd_atol, o.fwd_rtol);
  if (!o.check_backward) return;

  std::vector<float> w(ry.v.size());
  for (float& x : w) x = uni(gen);
  Tensor loss = sum(mul(y, from_vector(y.shape(), w)));
  absl::Status s = loss.backward();
  ASSERT_TRUE(s.ok()) << s;
  double max_grad = 0;
  for (size_t k = 0; k < specs.size(); ++k) {
    if (!specs[k].needs_grad) continue;
    Tensor g = in[k].grad();
    ASSERT_TRUE(g.defined()) << "input " << k << " got no gradient";
    auto gv = g.to_vector();
    ASSERT_TRUE(gv.ok()) << gv.status();
    for (size_t i = 0; i < rin[k].v.size(); ++i) {
      std::vector<RefTensor> p = rin;
      auto eval = [&](double delta) {
        p[k].v[i] = rin[k].v[i] + delta;
        RefTensor r = ref(p);
        double acc = 0;
        for (size_t j = 0; j < r.v.size(); ++j) acc += r.v[j] * w[j];
        return acc;
      };
      const double fd = (eval(o.fd_step) - eval(-o.fd_step)) / (2 * o.fd_step);
      const double d = std::abs((*gv)[i] - fd);
      max_grad = std::max(max_grad, d);
      ASSERT_LE(d, o.grad_atol + o.grad_rtol * std::abs(fd))
          << "gradient of input " << k << " element " << i << ": mtc " << (*gv)[i] << " finite difference " << fd;
    }
  }
  std::printf("  backward: max |mtc grad - finite difference| = %.3g (tol %.1g + %.1g*|fd|)\n", max_grad,
              o.grad_atol, o.grad_rtol);
}

// expect_op_error: t's op failed (at shape inference or in its kernel) with InvalidArgument,
// and the message, read at the synchronising to_vector, holds every piece.
inline void expect_op_error(const Tensor& t, std::initializer_list<const char*> pieces) {
  absl::Status s = t.dtype() == DType::kI32 ? t.to_vector_i32().status() : t.to_vector().status();
  ASSERT_FALSE(s.ok()) << "expected an error from " << t.desc().str();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const char* p : pieces) EXPECT_NE(s.message().find(p), std::string::npos) << "missing '" << p << "' in: " << s;
}

}  // namespace mtc
