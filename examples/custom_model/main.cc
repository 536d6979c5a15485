// A user's own model on mtc: a custom nn::Module (a small convolutional net), trained
// under a memory budget with AdamW and a cosine schedule, evaluated on held-out batches
// (top-1 accuracy through topk), saved to a safetensors checkpoint and loaded back into a
// fresh model, which must give the same held-out loss. Usage: custom_model [CHECKPOINT]
// (default custom_model.safetensors). Exit 0 when every step worked.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mtc/checkpoint.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/nn.h"
#include "mtc/ops.h"
#include "mtc/optim.h"
#include "mtc/runtime.h"

namespace {

using namespace mtc;

// SmallNet: conv 3->16, ReLU, conv 16->32 stride 2, ReLU, global average pool, linear to
// 10 classes. Modules are registered, so parameters() and checkpoints find them by name.
class SmallNet : public nn::Module {
 public:
  SmallNet() {
    conv1_ = register_module("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dConfig{3, 16, 3, 1, 1}));
    conv2_ = register_module("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dConfig{16, 32, 3, 2, 1}));
    fc_ = register_module("fc", std::make_shared<nn::Linear>(32, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(conv1_->forward(x));
    h = relu(conv2_->forward(h));
    return fc_->forward(global_avg_pool(h));
  }
  std::string type_name() const override { return "SmallNet"; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::Linear> fc_;
};

// evaluate: mean loss and top-1 accuracy of `net` over 4 held-out batches, in eval mode.
std::pair<double, double> evaluate(nn::Module& net) {
  data::SyntheticData held_out({3, 16, 16}, 10, /*seed=*/99);
  net.eval();
  NoGradGuard no_grad;
  double loss = 0, hits = 0, n = 0;
  for (int b = 0; b < 4; ++b) {
    const data::Batch batch = data::to_device(held_out.batch_at(b, 32));
    Tensor logits = net.forward(batch.images);
    loss += *cross_entropy(logits, batch.labels).item() * 32;
    const std::vector<int32_t> top = *topk(logits, 1).to_vector_i32(), want = *batch.labels.to_vector_i32();
    for (size_t i = 0; i < want.size(); ++i) hits += top[i] == want[i];
    n += static_cast<double>(want.size());
  }
  net.train();
  return {loss / n, hits / n};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "custom_model.safetensors";
  mtc::RuntimeOptions o;
  o.memory_bytes = size_t{256} << 20;
  o.num_threads = 2;
  o.evict.budget_bytes = size_t{8} << 20;  // DTE keeps the compute region's use under 8 MiB
  auto rt = mtc::Runtime::create(o);
  if (!rt.ok()) {
    std::fprintf(stderr, "runtime: %s\n", std::string(rt.status().message()).c_str());
    return 1;
  }
  SmallNet net;
  auto opt = mtc::optim::AdamW::create(net.parameters(), {.lr = 1e-3f});
  if (!opt.ok()) return 1;
  const mtc::optim::LrSchedule schedule{.kind = mtc::optim::LrSchedule::Kind::kCosine, .base = 1e-3f, .warmup = 2,
                                        .total = 20};
  mtc::data::SyntheticData train({3, 16, 16}, 10, /*seed=*/1);
  for (int it = 1; it <= 20; ++it) {
    (*opt)->set_lr(schedule.at(it));
    auto loss = mtc::models::train_step(net, **opt, mtc::data::to_device(train.batch_at(it % 4, 32)));
    if (!loss.ok()) {
      std::fprintf(stderr, "iteration %d: %s\n", it, std::string(loss.status().message()).c_str());
      return 1;
    }
    if (it % 5 == 0) std::printf("iter %d loss %.4f lr %.6f\n", it, *loss->item(), (*opt)->lr());
  }
  const auto [loss, acc] = evaluate(net);
  std::printf("held out: loss %.4f top-1 %.1f%%\n", loss, 100 * acc);
  // Save, then load into a fresh model: the same held-out loss.
  auto file = mtc::checkpoint::collect(net, opt->get(), {{"iteration", "20"}});
  if (!file.ok() || !mtc::checkpoint::write_safetensors(path, *file).ok()) return 1;
  SmallNet fresh;
  auto back = mtc::checkpoint::read_safetensors(path);
  if (!back.ok() || !mtc::checkpoint::restore(path, *back, fresh, nullptr).ok()) return 1;
  const auto [loss2, acc2] = evaluate(fresh);
  std::printf("saved to %s and loaded: loss %.4f top-1 %.1f%%\n", path.c_str(), loss2, 100 * acc2);
  return loss2 == loss ? 0 : 1;
}
