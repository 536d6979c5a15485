// train_step: the training iteration that mtc-train and the training tests run.
#include "mtc/models.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc::models {

absl::StatusOr<Tensor> train_step(nn::Module& net, optim::Optimizer& opt, const data::Batch& batch) {
  opt.zero_grad();
  Tensor loss = cross_entropy(net.forward(batch.images), batch.labels);
  MTC_RETURN_IF_ERROR(loss.backward());
  opt.step();
  return loss;
}

}  // namespace mtc::models
