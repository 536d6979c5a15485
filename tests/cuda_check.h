// The CUDA-against-CPU harness: runs one computation on a CPU runtime and on a CUDA
// runtime from the same input values, then compares every output and, for loss =
// sum(output_k * w_k) over the outputs with random w, every input's gradient, within
// |cuda - cpu| <= atol + rtol * |cpu|. Tests call MTC_SKIP_WITHOUT_GPU() first: without a
// visible GPU they skip with a message.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device.h"
#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"

#define MTC_SKIP_WITHOUT_GPU()                                                      \
  do {                                                                              \
    if (::mtc::visible_gpus() == 0) GTEST_SKIP() << "no GPU visible: CUDA kernels not run"; \
  } while (0)

namespace mtc::cuda_check {

struct Input {
  Shape shape;
  std::vector<float> f32;    // f32 values, or
  std::vector<int32_t> i32;  // i32 values (no gradient)
  bool requires_grad = true;
};

// random_input: N(0, 1) values from `seed`.
inline Input random_input(Shape shape, uint64_t seed, bool requires_grad = true) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd;
  Input in{shape, std::vector<float>(static_cast<size_t>(numel(shape))), {}, requires_grad};
  for (float& v : in.f32) v = nd(gen);
  return in;
}

struct Result {
  std::vector<std::vector<float>> outputs, grads;  // grads: per input (empty without grad)
};

inline std::unique_ptr<Runtime> make_runtime(const char* device) {
  RuntimeOptions o;
  o.device = device;
  o.memory_bytes = size_t{1} << 30;
  o.num_threads = 2;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  return rt.ok() ? std::move(rt).value() : nullptr;
}

// run_on: f on `device`, from inputs; backward from sum(output_k * w_k) when `backward`.
inline Result run_on(const char* device, const std::function<TensorList(const TensorList&)>& f,
                     const std::vector<Input>& inputs, bool backward) {
  Result r;
  auto rt = make_runtime(device);
  if (!rt) return r;
  TensorList in;
  for (const Input& i : inputs) {
    Tensor t = i.i32.empty() ? from_vector(i.shape, i.f32) : from_vector_i32(i.shape, i.i32);
    if (i.i32.empty() && i.requires_grad && backward) t.set_requires_grad(true);
    in.push_back(t);
  }
  TensorList out = f(in);
  Tensor loss;
  std::mt19937_64 gen(42);
  std::normal_distribution<float> nd;
  for (const Tensor& y : out) {
    auto v = y.to_vector();
    EXPECT_TRUE(v.ok()) << device << ": " << v.status();
    r.outputs.push_back(v.ok() ? *v : std::vector<float>());
    if (backward && y.requires_grad()) {
      std::vector<float> w(static_cast<size_t>(y.numel()));
      for (float& x : w) x = nd(gen);
      Tensor term = sum(mul(y, from_vector(y.shape(), w)));
      loss = loss.defined() ? add(loss, term) : term;
    }
  }
  if (backward && loss.defined()) {
    absl::Status s = loss.backward();
    EXPECT_TRUE(s.ok()) << device << ": " << s;
    for (const Tensor& t : in) {
      std::vector<float> g;
      if (t.requires_grad() && t.grad().defined()) {
        auto v = t.grad().to_vector();
        EXPECT_TRUE(v.ok()) << device << ": " << v.status();
        if (v.ok()) g = *v;
      }
      r.grads.push_back(g);
    }
  }
  absl::Status s = rt->interpreter().sync();
  EXPECT_TRUE(s.ok()) << device << ": " << s;
  return r;
}

// compare: runs f on both devices and compares outputs and input gradients.
inline void compare(const std::string& what, const std::function<TensorList(const TensorList&)>& f,
                    const std::vector<Input>& inputs, double rtol = 1e-4, double atol = 1e-5,
                    bool backward = true) {
  SCOPED_TRACE(what);
  const Result cpu = run_on("cpu", f, inputs, backward);
  const Result gpu = run_on("cuda", f, inputs, backward);
  auto close = [&](const std::vector<float>& a, const std::vector<float>& b, const std::string& name) {
    ASSERT_EQ(a.size(), b.size()) << name;
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
      worst = std::max(worst, d / (atol + rtol * std::fabs(b[i])));
      ASSERT_LE(d, atol + rtol * std::fabs(b[i])) << name << " element " << i << ": cuda " << a[i] << " cpu " << b[i];
    }
    std::printf("  %s %s: %zu values, worst |cuda - cpu| / tolerance %.3f\n", what.c_str(), name.c_str(), a.size(),
                worst);
  };
  ASSERT_EQ(gpu.outputs.size(), cpu.outputs.size());
  for (size_t k = 0; k < cpu.outputs.size(); ++k) close(gpu.outputs[k], cpu.outputs[k], "output " + std::to_string(k));
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (size_t k = 0; k < cpu.grads.size(); ++k) close(gpu.grads[k], cpu.grads[k], "grad of input " + std::to_string(k));
}

}  // namespace mtc::cuda_check
