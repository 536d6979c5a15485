// make_device: picks the device implementation the options name; visible_gpus.
#include "device.h"

#include "absl/strings/str_cat.h"

namespace mtc {

absl::StatusOr<std::shared_ptr<Device>> make_cpu_device(const DeviceOptions& o);
#ifdef MTC_HAVE_CUDA
absl::StatusOr<std::shared_ptr<Device>> make_cuda_device(const DeviceOptions& o);
int cuda_device_count();  // the CUDA backend's: cudaGetDeviceCount, 0 on an error
#endif

int visible_gpus() {
#ifdef MTC_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

absl::StatusOr<std::shared_ptr<Device>> make_device(const DeviceOptions& o) {
  switch (o.type) {
    case DeviceType::kCPU:
      return make_cpu_device(o);
    case DeviceType::kCUDA:
#ifdef MTC_HAVE_CUDA
      return make_cuda_device(o);
#else
      return absl::UnavailableError("device cuda: this build of mtc has no CUDA backend (nvcc was not found at configure time)");
#endif
  }
  return absl::InvalidArgumentError("unknown device type");
}

}  // namespace mtc
