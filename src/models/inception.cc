// GoogLeNet: inception modules of four concatenated branches (torchvision's layout
// without the auxiliary heads, and a CIFAR stem). See include/mtc/models.h.
#include "absl/strings/str_cat.h"
#include "mtc/models.h"
#include "mtc/status.h"

namespace mtc::models {
namespace {

constexpr float kEps = 1e-3f;  // torchvision's BasicConv2d

std::shared_ptr<ConvBnRelu> unit(int64_t in, int64_t out, int kernel, int stride = 1, int padding = 0) {
  return std::make_shared<ConvBnRelu>(in, out, kernel, stride, padding, kEps);
}

// Inception: branch1 1x1; branch2 1x1 (c3r) - 3x3 (c3); branch3 1x1 (c5r) - 3x3 (c5), as
// torchvision has it; branch4 maxpool 3x3/1 pad 1 - 1x1 (pool_proj); concatenated.
class Inception final : public nn::Module {
 public:
  Inception(int64_t in, int64_t c1, int64_t c3r, int64_t c3, int64_t c5r, int64_t c5, int64_t pool_proj) {
    branch1_ = register_module("branch1", unit(in, c1, 1));
    branch2_ = register_module("branch2", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                                              unit(in, c3r, 1), unit(c3r, c3, 3, 1, 1)}));
    branch3_ = register_module("branch3", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                                              unit(in, c5r, 1), unit(c5r, c5, 3, 1, 1)}));
    branch4_ = register_module("branch4", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                                              std::make_shared<nn::MaxPool2d>(3, 1, 1), unit(in, pool_proj, 1)}));
    out_channels = c1 + c3 + c5 + pool_proj;
  }
  Tensor forward(const Tensor& x) override {
    const Tensor b[] = {branch1_->forward(x), branch2_->forward(x), branch3_->forward(x), branch4_->forward(x)};
    return concat(b, 1);
  }
  std::string type_name() const override { return "Inception"; }
  int64_t out_channels = 0;

 private:
  std::shared_ptr<ConvBnRelu> branch1_;
  std::shared_ptr<nn::Sequential> branch2_, branch3_, branch4_;
};

}  // namespace

GoogLeNet::GoogLeNet(bool imagenet_stem, int num_classes) {
  MTC_CHECK(num_classes >= 1, "GoogLeNet with ", num_classes, " classes");
  if (imagenet_stem) {
    stem_ = register_module("stem", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                                        unit(3, 64, 7, 2, 3), std::make_shared<nn::MaxPool2d>(3, 2, 1), unit(64, 64, 1),
                                        unit(64, 192, 3, 1, 1), std::make_shared<nn::MaxPool2d>(3, 2, 1)}));
  } else {
    stem_ = register_module("stem", std::make_shared<nn::Sequential>(
                                        std::vector<std::shared_ptr<nn::Module>>{unit(3, 192, 3, 1, 1)}));
  }
  // (in, 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool proj), then a pool after 3b and 4e.
  const int64_t modules[9][7] = {
      {192, 64, 96, 128, 16, 32, 32},     {256, 128, 128, 192, 32, 96, 64},  {480, 192, 96, 208, 16, 48, 64},
      {512, 160, 112, 224, 24, 64, 64},   {512, 128, 128, 256, 24, 64, 64}, {512, 112, 144, 288, 32, 64, 64},
      {528, 256, 160, 320, 32, 128, 128}, {832, 256, 160, 320, 32, 128, 128}, {832, 384, 192, 384, 48, 128, 128}};
  const char* names[9] = {"inception3a", "inception3b", "inception4a", "inception4b", "inception4c",
                          "inception4d", "inception4e", "inception5a", "inception5b"};
  body_ = register_module("body", std::make_shared<nn::Sequential>());
  for (int i = 0; i < 9; ++i) {
    const int64_t* m = modules[i];
    auto inc = std::make_shared<Inception>(m[0], m[1], m[2], m[3], m[4], m[5], m[6]);
    MTC_CHECK(i == 8 || inc->out_channels == modules[i + 1][0], names[i], " makes ", inc->out_channels, " channels");
    body_->push_back(inc);
    if (i == 1) body_->push_back(std::make_shared<nn::MaxPool2d>(3, 2, 1));  // maxpool3
    if (i == 6) {  // maxpool4: 2x2/2 on ImageNet (torchvision), 3x3/2 pad 1 on CIFAR
      body_->push_back(imagenet_stem ? std::make_shared<nn::MaxPool2d>(2, 2, 0) : std::make_shared<nn::MaxPool2d>(3, 2, 1));
    }
  }
  fc_ = register_module("fc", std::make_shared<nn::Linear>(1024, num_classes));
}

Tensor GoogLeNet::forward(const Tensor& x) {
  return fc_->forward(dropout(global_avg_pool(body_->forward(stem_->forward(x))), 0.2f, is_training()));
}

}  // namespace mtc::models
