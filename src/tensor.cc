// Tensor handles, descriptions and dtypes: the small pieces of include/mtc/tensor.h.
#include "mtc/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist/dtp.h"
#include "mtc/interpreter.h"
#include "mtc/status.h"

namespace mtc {

size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 4; }
const char* dtype_name(DType t) { return t == DType::kF32 ? "f32" : "i32"; }

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape broadcast_strides(const Shape& in, const Shape& out) {
  Shape st(out.size(), 0);
  int64_t stride = 1;
  for (int i = static_cast<int>(in.size()) - 1; i >= 0; --i) {
    const int o = i + static_cast<int>(out.size() - in.size());
    st[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return st;
}

std::string shape_str(const Shape& s) { return absl::StrCat("[", absl::StrJoin(s, ","), "]"); }
std::string TensorDesc::str() const { return absl::StrCat(dtype_name(dtype), shape_str(shape)); }

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int k = i < 0 ? i + n : i;
  if (poisoned() && (k < 0 || k >= n)) return 0;
  MTC_CHECK(k >= 0 && k < n, "dim ", i, " out of range for ", desc().str());
  return shape()[k];
}

absl::StatusOr<std::vector<float>> Tensor::to_vector() const {
  if (!defined()) return absl::InvalidArgumentError("to_vector: undefined tensor");
  if (dtype() != DType::kF32) return absl::InvalidArgumentError(absl::StrCat("to_vector: tensor is ", desc().str(), ", expected f32"));
  std::vector<float> v(numel());
  if (global()) {  // DTP: the whole tensor, gathered from the ranks (a collective)
    const Tensor whole = dtp::gather(*this);
    MTC_RETURN_IF_ERROR(interpreter()->get_value(whole, v.data(), v.size() * sizeof(float)));
    return v;
  }
  MTC_RETURN_IF_ERROR(interpreter()->get_value(*this, v.data(), v.size() * sizeof(float)));
  return v;
}

absl::StatusOr<std::vector<int32_t>> Tensor::to_vector_i32() const {
  if (!defined()) return absl::InvalidArgumentError("to_vector_i32: undefined tensor");
  if (dtype() != DType::kI32) return absl::InvalidArgumentError(absl::StrCat("to_vector_i32: tensor is ", desc().str(), ", expected i32"));
  std::vector<int32_t> v(numel());
  if (global()) {
    const Tensor whole = dtp::gather(*this);
    MTC_RETURN_IF_ERROR(interpreter()->get_value(whole, v.data(), v.size() * sizeof(int32_t)));
    return v;
  }
  MTC_RETURN_IF_ERROR(interpreter()->get_value(*this, v.data(), v.size() * sizeof(int32_t)));
  return v;
}

absl::StatusOr<float> Tensor::item() const {
  if (defined() && numel() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("item: tensor ", desc().str(), " has ", numel(), " elements, expected 1"));
  }
  MTC_ASSIGN_OR_RETURN(std::vector<float> v, to_vector());
  return v[0];
}

bool Tensor::requires_grad() const { return meta_ && meta_->requires_grad; }

Tensor& Tensor::set_requires_grad(bool r) {
  if (!meta_) meta_ = std::make_shared<AutogradMeta>();
  MTC_CHECK(!meta_->grad_fn || r, "set_requires_grad(false) on a non-leaf tensor");
  meta_->requires_grad = r;
  return *this;
}

// A global parameter's gradient is kept as this rank's part (autograd adds local
// tensors) and handed out held like the parameter.
Tensor Tensor::grad() const {
  if (!meta_) return Tensor();
  if (global() && meta_->grad.defined() && !meta_->grad.global()) {
    return dtp::wrap(meta_->grad, desc(), ref_->dist->placement, ref_->dist->group);
  }
  return meta_->grad;
}

void Tensor::set_grad(Tensor g) {
  if (!meta_) meta_ = std::make_shared<AutogradMeta>();
  meta_->grad = g.global() ? dtp::local(g) : std::move(g);
}

namespace {
thread_local bool tls_grad_enabled = true;
}
bool grad_mode_enabled() { return tls_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(tls_grad_enabled) { tls_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { tls_grad_enabled = prev_; }

}  // namespace mtc
