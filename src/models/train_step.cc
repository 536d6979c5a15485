// train_step: the training iteration that mtc-train and the training tests run.
#include "mtc/distributed.h"
#include "mtc/interpreter.h"
#include "mtc/models.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc::models {

absl::StatusOr<Tensor> train_step(nn::Module& net, optim::Optimizer& opt, const data::Batch& batch,
                                  dist::DataParallel* dp, const StepHooks* hooks) {
  Interpreter* interp = batch.images.interpreter();  // trace marks; free when not tracing
  opt.zero_grad();
  interp->mark("forward");
  Tensor loss = cross_entropy_loss(net.forward(batch.images), batch.labels);
  if (Tensor aux = net.auxiliary_loss(); aux.defined()) loss = add(loss, aux);  // MoE's load balancing
  if (hooks && hooks->after_forward) MTC_RETURN_IF_ERROR(hooks->after_forward());
  interp->mark("backward");
  MTC_RETURN_IF_ERROR(loss.backward());
  if (hooks && hooks->finish) {
    hooks->finish();
  } else if (dp != nullptr) {
    dp->finish();
  }
  interp->mark("step");
  opt.step();
  return loss;
}

}  // namespace mtc::models
