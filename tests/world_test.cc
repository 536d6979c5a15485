// launch/world.h: rank, world size and local rank from Open MPI's or torchrun's
// environment, one rank without either, and errors naming a bad variable.
#include "world.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace mtc::launch {
namespace {

// Env: sets variables for one test and restores the environment after it.
class Env {
 public:
  Env() {
    for (const char* v : kAll) unsetenv(v);
  }
  ~Env() {
    for (const char* v : kAll) unsetenv(v);
  }
  void set(const char* k, const char* v) { setenv(k, v, 1); }

 private:
  static constexpr const char* kAll[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE"};
};

TEST(World, AloneIsOneRank) {
  Env e;
  auto w = world_from_environment();
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->rank, 0);
  EXPECT_EQ(w->size, 1);
  EXPECT_EQ(w->local_rank, 0);
  EXPECT_EQ(w->launcher, "none");
}

TEST(World, ReadsOpenMpi) {
  Env e;
  e.set("OMPI_COMM_WORLD_RANK", "5");
  e.set("OMPI_COMM_WORLD_SIZE", "8");
  e.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  e.set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  e.set("RANK", "0");  // Open MPI's variables win
  auto w = world_from_environment();
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->rank, 5);
  EXPECT_EQ(w->size, 8);
  EXPECT_EQ(w->local_rank, 1);
  EXPECT_EQ(w->local_size, 4);
  EXPECT_EQ(w->launcher, "mpirun");
  EXPECT_EQ(device_for(*w, 2), 1);
  EXPECT_EQ(device_for(*w, 1), 0);
  EXPECT_EQ(describe(*w), "rank 5 of 8 (local 1 of 4, mpirun)");
}

TEST(World, ReadsTorchrun) {
  Env e;
  e.set("RANK", "3");
  e.set("WORLD_SIZE", "4");
  e.set("LOCAL_RANK", "3");
  auto w = world_from_environment();
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->rank, 3);
  EXPECT_EQ(w->size, 4);
  EXPECT_EQ(w->local_rank, 3);
  EXPECT_EQ(w->launcher, "torchrun");
  EXPECT_EQ(device_for(*w, 8), 3);
}

TEST(World, BadValuesNameTheVariable) {
  {
    Env e;
    e.set("RANK", "x");
    e.set("WORLD_SIZE", "2");
    auto w = world_from_environment();
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find("RANK='x'"), std::string::npos) << w.status();
  }
  {
    Env e;
    e.set("OMPI_COMM_WORLD_RANK", "4");
    e.set("OMPI_COMM_WORLD_SIZE", "4");
    auto w = world_from_environment();
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find("OMPI_COMM_WORLD_RANK='4': expected a whole number in [0, 3]"),
              std::string::npos)
        << w.status();
  }
}

}  // namespace
}  // namespace mtc::launch
