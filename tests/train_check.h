// What the training tests that compare two runs bit for bit share: building the model
// under test, one recorded training step, and the bit-for-bit comparison of losses and
// final weights.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/nn.h"
#include "mtc/optim.h"

namespace mtc::train_check {

// Trained: a run's loss per iteration and its parameters at the end.
struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
};

// net_or_model: `custom` when the test built its own network, else the registry's model
// `name`; *sample is set to the model's input shape (CIFAR's when custom).
inline std::shared_ptr<nn::Module> net_or_model(std::shared_ptr<nn::Module> custom, const std::string& name,
                                                Shape* sample) {
  *sample = Shape{3, 32, 32};
  if (custom) return custom;
  auto m = models::make_model(name);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  *sample = m->sample_shape;
  return m->net;
}

// step: one training step on synthetic batch k (of 4, repeating); its loss is appended
// to `losses`. False, with the test failed, when the step or reading the loss fails.
inline bool step(nn::Module& net, optim::Optimizer& opt, const data::SyntheticData& src, int k, int batch,
                 std::vector<float>& losses) {
  auto loss = models::train_step(net, opt, data::to_device(src.batch_at(k % 4, batch)));
  EXPECT_TRUE(loss.ok()) << loss.status();
  if (!loss.ok()) return false;
  auto l = loss->item();
  EXPECT_TRUE(l.ok()) << l.status();
  if (!l.ok()) return false;
  losses.push_back(*l);
  return true;
}

// expect_bit_identical: every loss and every weight of `got` has the bits of `ref`.
inline void expect_bit_identical(const Trained& ref, const Trained& got, const std::string& what) {
  ASSERT_EQ(ref.losses.size(), got.losses.size()) << what;
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    ASSERT_EQ(std::memcmp(&ref.losses[i], &got.losses[i], sizeof(float)), 0)
        << what << ": loss of iteration " << i << ": " << ref.losses[i] << " vs " << got.losses[i];
  }
  ASSERT_EQ(ref.weights.size(), got.weights.size()) << what;
  for (size_t p = 0; p < ref.weights.size(); ++p) {
    ASSERT_EQ(std::memcmp(ref.weights[p].data(), got.weights[p].data(), ref.weights[p].size() * sizeof(float)), 0)
        << what << ": parameter " << p << " differs";
  }
}

}  // namespace mtc::train_check
