// make_device: picks the device implementation the options name (the CUDA one from its
// plug-in, loaded on first use); visible_gpus.
#include "device.h"

#include "absl/strings/str_cat.h"
#include "comm/plugin.h"
#include "mtc/status.h"

namespace mtc {

absl::StatusOr<std::shared_ptr<Device>> make_cpu_device(const DeviceOptions& o);

namespace {
absl::StatusOr<const CudaPlugin*> cuda_plugin() {
#ifdef MTC_HAVE_CUDA
  auto t = plugin::load(kCudaPluginLibrary, kCudaPluginEntry);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat("device cuda: the CUDA backend: ", t.status().message()));
  }
  return static_cast<const CudaPlugin*>(*t);
#else
  return absl::UnavailableError(
      "device cuda: this build of mtc has no CUDA backend (nvcc was not found at configure time)");
#endif
}
}  // namespace

absl::Status load_cuda_backend() { return cuda_plugin().status(); }

int visible_gpus() {
  auto p = cuda_plugin();
  return p.ok() ? (*p)->device_count() : 0;
}

absl::StatusOr<std::shared_ptr<Device>> make_device(const DeviceOptions& o) {
  switch (o.type) {
    case DeviceType::kCPU:
      return make_cpu_device(o);
    case DeviceType::kCUDA: {
      MTC_ASSIGN_OR_RETURN(const CudaPlugin* p, cuda_plugin());
      return p->make(o);
    }
  }
  return absl::InvalidArgumentError("unknown device type");
}

}  // namespace mtc
