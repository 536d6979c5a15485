// Tests of the op registry's shared pieces (src/op_def.cc): the default cost estimate and
// the schema list, against hand-counted figures.
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "op_def.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/reshape.h"

namespace mtc {
namespace {

TEST(OpCost, DefaultCountsTheLargestTensorAndEveryByte) {
  // A reduction of 1000 elements to one: 1000 flops (input side), 4000 + 4 bytes.
  ReduceSumOp sum_op({true}, Shape{}, 1.f);
  const TensorDesc in{{1000}, DType::kF32}, out{{}, DType::kF32};
  OpCost c = sum_op.cost(std::span(&in, 1), std::span(&out, 1));
  EXPECT_EQ(c.flops, 1000);
  EXPECT_EQ(c.bytes_read, 4000);
  EXPECT_EQ(c.bytes_written, 4);
  // A reshape moves data and computes nothing.
  ReshapeOp reshape_op({10, 100});
  const TensorDesc r{{10, 100}, DType::kF32};
  c = reshape_op.cost(std::span(&in, 1), std::span(&r, 1));
  EXPECT_EQ(c.flops, 0);
  EXPECT_EQ(c.bytes_written, 4000);
  // gelu counts 8 flops per element.
  ActOp gelu_op(ActKind::kGelu);
  c = gelu_op.cost(std::span(&in, 1), std::span(&in, 1));
  EXPECT_EQ(c.flops, 8000);
}

TEST(OpCost, MatmulCountsTwoMNK) {
  auto a = TensorDesc{{3, 8, 16}, DType::kF32}, b = TensorDesc{{16, 4}, DType::kF32};
  const TensorDesc ins[] = {a, b};
  const TensorDesc out{{3, 8, 4}, DType::kF32};
  MatmulOp op;
  EXPECT_EQ(op.cost(ins, std::span(&out, 1)).flops, 2.0 * 3 * 8 * 16 * 4);
}

TEST(OpSchemas, EveryRegisteredOpHasACpuKernelAndAUniqueName) {
  std::set<std::string> names;
  for (const OpSchema* s : all_op_schemas()) {
    EXPECT_TRUE(names.insert(s->name).second) << "two schemas named " << s->name;
    EXPECT_NE(s->kernels[static_cast<int>(DeviceType::kCPU)], nullptr) << "op " << s->name << " has no CPU kernel";
  }
  std::printf("  %zu op schemas registered\n", names.size());
  EXPECT_GE(names.size(), 40u);
}

}  // namespace
}  // namespace mtc
