// DTP's gradient reduction: the Replicated parameters' gradients summed over the
// partition group with data parallel's buckets (include/mtc/dtp.h, GradReducer), and the
// per-rank training-state figures. Its own file so that the mesh (data parallel across
// partition groups) can grow here apart from the dispatch.
#include "dist/dtp.h"

namespace mtc::dtp {

absl::StatusOr<std::unique_ptr<GradReducer>> GradReducer::create(nn::Module& net, const Group& g, size_t bucket_bytes) {
  auto r = std::unique_ptr<GradReducer>(new GradReducer());
  TensorList replicated;
  for (const Tensor& p : net.parameters()) {
    if (!p.global() || placement(p).replicated()) replicated.push_back(p);
  }
  r->replicated_ = static_cast<int>(replicated.size());
  if (!replicated.empty() && g->parts > 1) {
    MTC_ASSIGN_OR_RETURN(r->dp_, dist::DataParallel::create(std::move(replicated), g->comm,
                                                            {.bucket_bytes = bucket_bytes,
                                                             .broadcast_parameters = false,
                                                             .reduce = dist::Reduce::kSum}));
  }
  return r;
}

void GradReducer::finish() {
  if (dp_) dp_->finish();
}

StateBytes state_bytes(nn::Module& net) {
  StateBytes b;
  for (const Tensor& p : net.parameters()) {
    b.parameters += local(p).desc().bytes();
    if (Tensor gr = p.grad(); gr.defined()) b.gradients += local(gr).desc().bytes();
  }
  return b;
}

}  // namespace mtc::dtp
