// Tests of src/data: the host Rng's determinism and moments, seeded synthetic batches,
// and the CIFAR-10 reader on small files the test writes (valid, truncated, mislabelled,
// empty, a directory of five batches, shuffled epochs).
#include "mtc/data.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "op_check.h"

namespace mtc::data {
namespace {

namespace fs = std::filesystem;

TEST(Rng, SameSeedSameStreamAndStreamsDiffer) {
  Rng a(7), b(7), c(8), d(7, 1);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    EXPECT_NE(x, c.next_u64());
    EXPECT_NE(x, d.next_u64());
  }
}

TEST(Rng, UniformNormalAndBelowMoments) {
  Rng r(42);
  constexpr int kN = 200000;
  double su = 0, su2 = 0, sn = 0, sn2 = 0;
  std::vector<int> counts(10, 0);
  for (int i = 0; i < kN; ++i) {
    const float u = r.uniform(-2.f, 2.f);
    ASSERT_GE(u, -2.f);
    ASSERT_LT(u, 2.f);
    su += u;
    su2 += u * u;
    const float z = r.normal();
    sn += z;
    sn2 += z * z;
    ++counts[r.below(10)];
  }
  // U(-2, 2): mean 0, variance 16/12. N(0, 1). Standard errors at n = 2e5 are ~3e-3.
  EXPECT_NEAR(su / kN, 0.0, 0.02);
  EXPECT_NEAR(su2 / kN, 16.0 / 12, 0.02);
  EXPECT_NEAR(sn / kN, 0.0, 0.02);
  EXPECT_NEAR(sn2 / kN, 1.0, 0.02);
  for (int c : counts) EXPECT_NEAR(c, kN / 10, kN / 100) << "below(10) is not uniform";
}

TEST(SyntheticData, ReproducibleFromSeedAndIteration) {
  SyntheticData a({3, 4, 4}, 10, /*seed=*/5), b({3, 4, 4}, 10, /*seed=*/5), c({3, 4, 4}, 10, /*seed=*/6);
  HostBatch a0 = a.next(8), a1 = a.next(8);
  EXPECT_EQ(shape_str(a0.shape), "[8,3,4,4]");
  ASSERT_EQ(a0.images.size(), 8u * 48);
  ASSERT_EQ(a0.labels.size(), 8u);
  for (int32_t l : a0.labels) {
    EXPECT_GE(l, 0);
    EXPECT_LT(l, 10);
  }
  // Batch 1 drawn directly equals the second call of next(), whatever came before.
  HostBatch b1 = b.batch_at(1, 8);
  EXPECT_EQ(a1.images, b1.images);
  EXPECT_EQ(a1.labels, b1.labels);
  EXPECT_NE(a0.images, a1.images);
  EXPECT_NE(a0.images, c.next(8).images);
  // Uniform images stay in [-1, 1).
  SyntheticData u({2, 3}, 4, 1, Distribution::kUniform);
  for (float x : u.next(16).images) {
    EXPECT_GE(x, -1.f);
    EXPECT_LT(x, 1.f);
  }
}

// RepeatBatches: the inner source's first `count` batches, in turn; a batch of another
// size than the one kept is a check failure, not a silent resize.
TEST(RepeatBatches, ReturnsTheFirstBatchesInTurn) {
  SyntheticData ref({3, 4, 4}, 10, 5);
  RepeatBatches r(std::make_unique<SyntheticData>(Shape{3, 4, 4}, 10, 5), 2);
  const HostBatch b0 = ref.batch_at(0, 4), b1 = ref.batch_at(1, 4);
  for (int i = 0; i < 5; ++i) {
    const HostBatch got = r.next(4);
    const HostBatch& want = i % 2 == 0 ? b0 : b1;
    EXPECT_EQ(got.images, want.images) << i;
    EXPECT_EQ(got.labels, want.labels) << i;
  }
  EXPECT_EQ(r.num_classes(), 10);
  EXPECT_EQ(shape_str(r.sample_shape()), "[3,4,4]");
  EXPECT_NE(r.describe().find("its first 2 batches, repeated"), std::string::npos) << r.describe();
  EXPECT_DEATH(r.next(3), "a batch of 3 asked for where 4 was kept");
}

TEST(SyntheticData, ToDevicePutsImagesAndLabels) {
  auto rt = make_test_runtime();
  SyntheticData s({3, 2, 2}, 5, 3);
  HostBatch h = s.next(4);
  Batch b = to_device(h);
  EXPECT_EQ(b.images.desc().str(), "f32[4,3,2,2]");
  EXPECT_EQ(b.labels.desc().str(), "i32[4]");
  auto im = b.images.to_vector();
  auto lb = b.labels.to_vector_i32();
  ASSERT_TRUE(im.ok() && lb.ok());
  EXPECT_EQ(*im, h.images);
  EXPECT_EQ(*lb, h.labels);
}

// CifarFiles: a scratch directory for CIFAR-10 files, removed afterwards.
class CifarFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mtc_data_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // record: label, then pixel p of channel c is (seed + c * 7 + p) mod 256.
  static std::string record(int label, int seed) {
    std::string r(kCifarRecordBytes, '\0');
    r[0] = static_cast<char>(label);
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 1024; ++p) r[1 + c * 1024 + p] = static_cast<char>((seed + c * 7 + p) % 256);
    return r;
  }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string records(int first, int n) {
    std::string s;
    for (int i = first; i < first + n; ++i) s += record(i % 10, i);
    return s;
  }
  fs::path dir_;
};

TEST_F(CifarFiles, ReadsRecordsAndNormalises) {
  const std::string path = write("data_batch_1.bin", records(0, 3));
  auto c = Cifar10::open(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->size(), 3);
  HostBatch b = (*c)->next(2);
  EXPECT_EQ(shape_str(b.shape), "[2,3,32,32]");
  EXPECT_EQ(b.labels, (std::vector<int32_t>{0, 1}));
  double max_err = 0;
  for (int i = 0; i < 2; ++i)
    for (int ch = 0; ch < 3; ++ch)
      for (int p = 0; p < 1024; p += 37) {
        const double pixel = (i + ch * 7 + p) % 256;
        const double want = (pixel / 255.0 - kCifarMean[ch]) / kCifarStd[ch];
        max_err = std::max(max_err, std::abs(b.images[(i * 3 + ch) * 1024 + p] - want));
      }
  EXPECT_LT(max_err, 1e-5);
  // In order, wrapping into the next epoch: records 2, 0.
  EXPECT_EQ((*c)->next(2).labels, (std::vector<int32_t>{2, 0}));
}

TEST_F(CifarFiles, TruncatedFileNamesFileAndRecord) {
  const std::string path = write("bad.bin", records(0, 2) + record(3, 3).substr(0, 100));
  auto c = Cifar10::open(path);
  ASSERT_FALSE(c.ok());
  const std::string msg(c.status().message());
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("record 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3073"), std::string::npos) << msg;
}

TEST_F(CifarFiles, BadLabelEmptyAndMissingFilesAreErrors) {
  std::string bytes = records(0, 3);
  bytes[kCifarRecordBytes] = 42;  // record 1's label
  const std::string bad = write("labels.bin", bytes);
  auto c = Cifar10::open(bad);
  ASSERT_FALSE(c.ok());
  std::string msg(c.status().message());
  EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  EXPECT_NE(msg.find("record 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("label 42"), std::string::npos) << msg;

  const std::string empty = write("empty.bin", "");
  c = Cifar10::open(empty);
  ASSERT_FALSE(c.ok());
  msg = std::string(c.status().message());
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;

  c = Cifar10::open((dir_ / "nope.bin").string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("nope.bin"), std::string::npos) << c.status();
}

TEST_F(CifarFiles, DirectoryReadsFiveBatchesAndNamesAMissingOne) {
  for (int i = 1; i <= 4; ++i) write("data_batch_" + std::to_string(i) + ".bin", records(i * 2, 2));
  auto c = Cifar10::open(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("data_batch_5.bin"), std::string::npos) << c.status();
  write("data_batch_5.bin", records(10, 2));
  c = Cifar10::open(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->size(), 10);
  EXPECT_EQ((*c)->next(10).labels, (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 8, 9, 0, 1}));
}

// seek: back to a position read before, the same batches follow, across an epoch's end
// and with shuffling; synthetic data and RepeatBatches too.
TEST_F(CifarFiles, SeekReturnsToAPositionAcrossEpochs) {
  const std::string path = write("data_batch_1.bin", records(0, 10));
  auto c = Cifar10::open(path, /*shuffle=*/true, /*seed=*/4);
  ASSERT_TRUE(c.ok()) << c.status();
  (*c)->next(7);
  EXPECT_EQ((*c)->position(), 7);
  const HostBatch b1 = (*c)->next(6), b2 = (*c)->next(6);  // 7..13 crosses into epoch 1
  EXPECT_EQ((*c)->position(), 19);
  ASSERT_TRUE((*c)->seek(7).ok());
  EXPECT_EQ((*c)->next(6).labels, b1.labels);
  EXPECT_EQ((*c)->next(6).images, b2.images);
  EXPECT_FALSE((*c)->seek(-1).ok());
  SyntheticData syn({2, 2}, 3, 1);
  syn.next(2);
  const HostBatch s1 = syn.next(2);
  ASSERT_TRUE(syn.seek(1).ok());
  EXPECT_EQ(syn.next(2).images, s1.images);
  RepeatBatches r(std::make_unique<SyntheticData>(Shape{2, 2}, 3, 1), 3);
  for (int i = 0; i < 4; ++i) r.next(2);
  const HostBatch r4 = r.next(2);  // batch 1 of the inner source
  ASSERT_TRUE(r.seek(4).ok());
  EXPECT_EQ(r.next(2).images, r4.images);
  EXPECT_EQ(r4.images, s1.images);
}

// Augmented, each image is its record padded by 4 black pixels, cropped at an offset in
// [-4, 4] each way and mirrored or not (checked against every such transform, computed
// here); the offsets vary over the records; the draws repeat when the position is read
// again; without augmentation the images are the records themselves.
TEST_F(CifarFiles, AugmentCropsAndFlipsReproducibly) {
  const std::string path = write("data_batch_1.bin", records(0, 40));
  auto plain = Cifar10::open(path);
  auto aug = Cifar10::open(path, /*shuffle=*/false, /*seed=*/3);
  ASSERT_TRUE(plain.ok() && aug.ok());
  (*aug)->set_augment(true);
  const HostBatch p = (*plain)->next(40), a = (*aug)->next(40);
  EXPECT_EQ(a.labels, p.labels);
  constexpr int kPlane = 32 * 32;
  std::set<int> seen;
  for (int i = 0; i < 40; ++i) {
    const float* src = p.images.data() + static_cast<size_t>(i) * kCifarImageBytes;
    const float* got = a.images.data() + static_cast<size_t>(i) * kCifarImageBytes;
    int match = -1;
    for (int t = 0; t < 9 * 9 * 2 && match < 0; ++t) {
      const int dy = t / 18 - 4, dx = t / 2 % 9 - 4;
      const bool flip = t % 2 == 1;
      bool ok = true;
      for (int c = 0; c < 3 && ok; ++c) {
        const float black = (0.f - kCifarMean[c]) * (1.f / kCifarStd[c]);  // as the reader rounds it
        for (int y = 0; y < 32 && ok; ++y) {
          for (int x = 0; x < 32 && ok; ++x) {
            const int sy = y + dy, sx = (flip ? 31 - x : x) + dx;
            const float want =
                sy >= 0 && sy < 32 && sx >= 0 && sx < 32 ? src[c * kPlane + sy * 32 + sx] : black;
            ok = got[c * kPlane + y * 32 + x] == want;
          }
        }
      }
      if (ok) match = t;
    }
    EXPECT_GE(match, 0) << "image " << i << " is no crop and flip of its record";
    seen.insert(match);
  }
  EXPECT_GE(seen.size(), 20u) << "the 40 images' crops and flips should vary";
  ASSERT_TRUE((*aug)->seek(0).ok());
  EXPECT_EQ((*aug)->next(40).images, a.images);
}

TEST_F(CifarFiles, ShuffledEpochsArePermutationsReproducibleFromSeed) {
  const std::string path = write("data_batch_1.bin", records(0, 10));
  auto a = Cifar10::open(path, /*shuffle=*/true, /*seed=*/9);
  auto b = Cifar10::open(path, true, 9);
  auto spec = open_data("cifar10:" + path, {}, 0, 9, true);
  ASSERT_TRUE(a.ok() && b.ok() && spec.ok());
  std::vector<int32_t> e0 = (*a)->next(10).labels, e1 = (*a)->next(10).labels;
  EXPECT_EQ(e0, (*b)->next(10).labels);
  EXPECT_EQ(e0, (*spec)->next(10).labels);
  EXPECT_NE(e0, e1) << "each epoch should draw a fresh order";
  for (auto e : {e0, e1}) {
    std::sort(e.begin(), e.end());
    EXPECT_EQ(e, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  }
}

TEST(OpenData, UnknownSpecAndEmptyPathAreErrors) {
  auto d = open_data("imagenet", {3, 32, 32}, 10, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("expected synthetic or cifar10:PATH"), std::string::npos) << d.status();
  EXPECT_FALSE(open_data("cifar10:", {3, 32, 32}, 10, 0).ok());
  d = open_data("synthetic", {3, 8, 8}, 10, 0);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(shape_str((*d)->next(2).shape), "[2,3,8,8]");
}

}  // namespace
}  // namespace mtc::data
