// The op-schema list and OpDef's defaults.
#include "op_def.h"

#include <algorithm>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mtc {
namespace {
std::mutex& schema_mu() {
  static std::mutex m;
  return m;
}
std::vector<const OpSchema*>& schema_list() {
  static std::vector<const OpSchema*> v;
  return v;
}
}  // namespace

const char* device_type_name(DeviceType t) { return t == DeviceType::kCPU ? "cpu" : "cuda"; }

OpSchema::OpSchema(const char* n) : name(n) {
  std::lock_guard<std::mutex> l(schema_mu());
  schema_list().push_back(this);
}

std::vector<const OpSchema*> all_op_schemas() {
  std::lock_guard<std::mutex> l(schema_mu());
  return schema_list();
}

OpCost OpDef::cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const {
  OpCost c;
  double largest = 0;  // elements
  for (const TensorDesc& d : in) {
    c.bytes_read += static_cast<double>(d.bytes());
    largest = std::max(largest, static_cast<double>(d.numel()));
  }
  for (const TensorDesc& d : out) {
    c.bytes_written += static_cast<double>(d.bytes());
    largest = std::max(largest, static_cast<double>(d.numel()));
  }
  c.flops = flops_per_element() * largest;
  return c;
}

absl::StatusOr<TensorList> OpDef::backward(const BackwardArgs&) const {
  return absl::UnimplementedError(absl::StrCat("op ", name(), " has no backward rule"));
}

std::string op_context(const OpDef& op, std::span<const TensorDesc> in) {
  std::string a = op.attrs();
  return absl::StrCat(op.name(), a.empty() ? "" : "(", a, a.empty() ? "" : ")", " on ",
                      in.empty() ? "no inputs"
                                 : absl::StrJoin(in, ", ", [](std::string* out, const TensorDesc& d) {
                                     out->append(d.str());
                                   }));
}

void OpDef::signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const {
  partition::Signature s;
  s.in.assign(in.size(), partition::Placement::R());
  s.out.assign(static_cast<size_t>(std::max(num_outputs(), 0)), partition::Placement::R());
  out.push_back(std::move(s));
}

}  // namespace mtc
