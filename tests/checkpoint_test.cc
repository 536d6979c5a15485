// Checkpoints (include/mtc/checkpoint.h): safetensors read and written to the format's
// specification (a file the test lays out byte by byte, every malformation named), a
// model and its optimizer saved and restored bit for bit, mismatches refused with the
// model unchanged, and torchvision's ResNet-50 names loading into mtc's ResNet-50.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "mtc/checkpoint.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/optim.h"
#include "op_check.h"

namespace mtc {
namespace {

using checkpoint::HostTensor;
using checkpoint::SafetensorsFile;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("mtc_checkpoint_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void spit(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A file laid out by hand as the specification says: length, JSON header, buffer.
std::string by_hand(const std::string& header, const std::string& buffer) {
  return le64(header.size()) + header + buffer;
}

TEST(Safetensors, ReadsAFileLaidOutByTheSpecification) {
  const std::vector<float> w = {1.5f, -2.f, 3.25f, 0.f, 1e-3f, 7.f};
  const std::vector<int64_t> n = {42};
  const std::vector<int32_t> ids = {3, -1};
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"n":{"dtype":"I64","shape":[],)"
      R"("data_offsets":[24,32]},"ids":{"dtype":"I32","shape":[2],"data_offsets":[32,40]},)"
      R"("__metadata__":{"format":"pt","note":"by hand"}})";
  const std::string path = temp_path("hand.safetensors");
  spit(path, by_hand(header, bytes_of(w) + bytes_of(n) + bytes_of(ids)));
  absl::StatusOr<SafetensorsFile> f = checkpoint::read_safetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors.size(), 3u);
  EXPECT_EQ(f->tensors["w"].dtype, "F32");
  EXPECT_EQ(shape_str(f->tensors["w"].shape), "[2,3]");
  EXPECT_EQ(f->tensors["w"].data, bytes_of(w));
  EXPECT_EQ(f->tensors["n"].dtype, "I64");
  EXPECT_TRUE(f->tensors["n"].shape.empty());
  EXPECT_EQ(f->tensors["n"].data, bytes_of(n));
  EXPECT_EQ(f->tensors["ids"].data, bytes_of(ids));
  EXPECT_EQ(f->metadata["note"], "by hand");
  std::remove(path.c_str());
}

// Written, the file is what the specification says: the header length, a JSON header
// padded with spaces to 8 bytes, the tensors in name order without gaps; and it reads
// back equal. No temporary file is left.
TEST(Safetensors, WritesTheSpecificationsLayoutAndReadsItBack) {
  SafetensorsFile f;
  f.tensors["b"] = HostTensor{"F32", {3}, bytes_of(std::vector<float>{1, 2, 3})};
  f.tensors["a"] = HostTensor{"I64", {}, bytes_of(std::vector<int64_t>{-7})};
  f.metadata["iteration"] = "12";
  const std::string path = temp_path("written.safetensors");
  ASSERT_TRUE(checkpoint::write_safetensors(path, f).ok());
  const std::string raw = slurp(path);
  ASSERT_GE(raw.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(raw[i]);
  EXPECT_EQ(n % 8, 0u) << "the data starts 8-byte aligned";
  ASSERT_EQ(raw.size(), 8 + n + 8 + 12);
  const std::string header = raw.substr(8, n);
  EXPECT_NE(header.find(R"("a":{"data_offsets":[0,8],"dtype":"I64","shape":[]})"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("b":{"data_offsets":[8,20],"dtype":"F32","shape":[3]})"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("__metadata__":{"iteration":"12"})"), std::string::npos) << header;
  EXPECT_EQ(raw.substr(8 + n), bytes_of(std::vector<int64_t>{-7}) + bytes_of(std::vector<float>{1, 2, 3}));
  absl::StatusOr<SafetensorsFile> back = checkpoint::read_safetensors(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tensors["b"].data, f.tensors["b"].data);
  EXPECT_EQ(back->metadata, f.metadata);
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
    EXPECT_EQ(e.path().string().find(path + ".tmp"), std::string::npos) << "left behind: " << e.path();
  }
  std::remove(path.c_str());
}

// Every malformation is an error naming the file and, where one is at fault, the tensor.
TEST(Safetensors, MalformedFilesAreErrorsNamingTheFileAndTheTensor) {
  const std::string path = temp_path("bad.safetensors");
  const std::string good_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string good = by_hand(good_header, std::string(8, '\1'));
  auto expect_bad = [&](const std::string& bytes, const std::string& want) {
    spit(path, bytes);
    absl::StatusOr<SafetensorsFile> f = checkpoint::read_safetensors(path);
    ASSERT_FALSE(f.ok()) << want;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status();
    EXPECT_NE(f.status().message().find(want), std::string::npos) << "expected '" << want << "' in " << f.status();
  };
  spit(path, good);
  ASSERT_TRUE(checkpoint::read_safetensors(path).ok());
  expect_bad(good.substr(0, 5), "expected at least the 8-byte header length");
  expect_bad(good.substr(0, good.size() - 3), "tensor 'w': data_offsets [0, 8] outside the 5-byte data buffer");
  expect_bad(le64(1000) + good_header, "header length 1000");
  expect_bad(by_hand("[1, 2]", ""), "the header is not a JSON object");
  expect_bad(by_hand("{not json", ""), "the header is not a JSON object");
  expect_bad(by_hand(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
             "tensor 'w': dtype 'F33'");
  expect_bad(by_hand(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
             "tensor 'w': 8 bytes for F32 [3]: expected 12");
  expect_bad(by_hand(R"({"w":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')), "tensor 'w': expected");
  expect_bad(by_hand(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
             "tensor 'w' starts at byte 4 of the data buffer where 0 was expected (gap)");
  expect_bad(by_hand(R"({"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     std::string(8, '\0')),
             "(overlap)");
  expect_bad(by_hand(good_header, std::string(12, '\0')), "the data buffer holds 12 bytes and its tensors 8");
  expect_bad(by_hand(R"({"__metadata__":{"n":1}})", ""), "__metadata__ 'n' is not a string");
  {
    const std::string folder = temp_path("a_folder");
    std::filesystem::create_directories(folder);
    absl::StatusOr<SafetensorsFile> f = checkpoint::read_safetensors(folder);
    EXPECT_NE(f.status().message().find("is a folder: expected a safetensors file"), std::string::npos) << f.status();
    std::filesystem::remove(folder);
  }
  std::remove(path.c_str());
  absl::StatusOr<SafetensorsFile> none = checkpoint::read_safetensors(path);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
}

// A write whose temporary file cannot be made (a folder that does not exist) is an error
// and leaves nothing; a tensor whose bytes do not match its shape is refused.
TEST(Safetensors, AWriteThatCannotCompleteLeavesNothing) {
  SafetensorsFile f;
  f.tensors["w"] = HostTensor{"F32", {2}, std::string(8, '\0')};
  const std::string missing = temp_path("no_such_folder") + "/x.safetensors";
  absl::Status s = checkpoint::write_safetensors(missing, f);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot create"), std::string::npos) << s;
  f.tensors["w"].data.resize(6);
  s = checkpoint::write_safetensors(temp_path("short.safetensors"), f);
  EXPECT_NE(s.message().find("tensor 'w': 6 bytes for F32 [2]"), std::string::npos) << s;
  EXPECT_FALSE(std::filesystem::exists(temp_path("short.safetensors")));
}

// losses of `steps` training steps of `net` with `opt` on synthetic batches from `first`.
std::vector<float> train(nn::Module& net, optim::Optimizer& opt, int first, int steps) {
  data::SyntheticData src({3, 32, 32}, 10, 7);
  std::vector<float> l;
  for (int it = first; it < first + steps; ++it) {
    auto loss = models::train_step(net, opt, data::to_device(src.batch_at(it, 4)));
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) break;
    l.push_back(*loss->item());
  }
  return l;
}

std::vector<std::vector<float>> values(const nn::Module& net) {
  std::vector<std::vector<float>> v;
  for (const auto& [name, t] : net.named_parameters()) v.push_back(*t.to_vector());
  for (const auto& [name, t] : net.named_buffers()) v.push_back(*t.to_vector());
  return v;
}

std::unique_ptr<optim::Optimizer> make_opt(const std::string& kind, nn::Module& net) {
  if (kind == "sgd") return std::move(optim::Sgd::create(net.parameters(), {.lr = 0.05f, .momentum = 0.9f}).value());
  return std::move(optim::AdamW::create(net.parameters(), {.lr = 1e-3f}).value());
}

// ResNet-20 (batch norm's running statistics are buffers) trained 3 steps, saved,
// trained 3 more; a fresh model and optimizer restored from the file and trained the
// same 3 steps give the same losses and weights bit for bit. SGD with momentum, AdamW.
TEST(Checkpoint, AModelAndItsOptimizerResumeBitForBit) {
  for (const std::string kind : {"sgd", "adamw"}) {
    SCOPED_TRACE(kind);
    const std::string path = temp_path(kind + ".safetensors");
    std::vector<float> after;
    std::vector<std::vector<float>> weights;
    {
      auto rt = make_test_runtime();
      models::Model m = *models::make_model("resnet20");
      auto opt = make_opt(kind, *m.net);
      train(*m.net, *opt, 0, 3);
      absl::StatusOr<SafetensorsFile> f = checkpoint::collect(*m.net, opt.get(), {{"iteration", "3"}});
      ASSERT_TRUE(f.ok()) << f.status();
      EXPECT_EQ(f->metadata["optimizer"], kind);
      EXPECT_EQ(f->metadata["format"], checkpoint::kFormat);
      EXPECT_EQ(f->tensors.count(kind == "sgd" ? "optimizer.conv1.weight.momentum_buffer"
                                               : "optimizer.fc.weight.exp_avg_sq"),
                1u);
      ASSERT_TRUE(checkpoint::write_safetensors(path, *f).ok());
      after = train(*m.net, *opt, 3, 3);
      weights = values(*m.net);
    }
    auto rt = make_test_runtime();
    models::Model m = *models::make_model("resnet20");
    auto opt = make_opt(kind, *m.net);
    absl::StatusOr<SafetensorsFile> f = checkpoint::read_safetensors(path);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(checkpoint::restore(path, *f, *m.net, opt.get()).ok());
    EXPECT_EQ(train(*m.net, *opt, 3, 3), after);
    EXPECT_TRUE(values(*m.net) == weights) << "the weights differ";
    std::remove(path.c_str());
  }
}

// Each mismatch is refused naming the file and the tensor, before anything is written:
// the model keeps its values.
TEST(Checkpoint, MismatchesAreRefusedAndTheModelIsUnchanged) {
  auto rt = make_test_runtime();
  models::Model m = *models::make_model("mlp");
  auto opt = make_opt("adamw", *m.net);
  train(*m.net, *opt, 0, 1);
  const SafetensorsFile saved = *checkpoint::collect(*m.net, opt.get(), {});
  const std::string path = "run.safetensors";  // named in the errors only
  models::Model fresh = *models::make_model("mlp");
  auto fresh_opt = make_opt("adamw", *fresh.net);
  const auto before = values(*fresh.net);
  auto expect_refused = [&](const SafetensorsFile& f, optim::Optimizer* o, const std::string& want) {
    absl::Status s = checkpoint::restore(path, f, *fresh.net, o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("checkpoint 'run.safetensors'"), std::string::npos) << s;
    EXPECT_NE(s.message().find(want), std::string::npos) << "expected '" << want << "' in " << s;
    EXPECT_TRUE(values(*fresh.net) == before) << "the model changed";
  };
  const nn::NamedTensors named = m.net->named_parameters();
  const auto& [last, last_t] = named.back();  // the output layer's bias
  const std::string dims = shape_str(last_t.shape());
  SafetensorsFile f = saved;
  f.tensors.erase(last);
  expect_refused(f, fresh_opt.get(), "the model's tensor '" + last + "' (f32" + dims + ") is missing");
  f = saved;
  f.tensors[last].shape = {2, last_t.shape()[0] / 2};
  expect_refused(f, fresh_opt.get(),
                 "tensor '" + last + "' is F32 " + shape_str(f.tensors[last].shape) + ": the model expects F32 " + dims);
  f = saved;
  f.tensors["fc9.weight"] = HostTensor{"F32", {1}, std::string(4, '\0')};
  expect_refused(f, fresh_opt.get(), "tensor 'fc9.weight' (F32 [1]) is not in the model or its optimizer");
  auto sgd = make_opt("sgd", *fresh.net);
  expect_refused(saved, sgd.get(), "optimizer state of adamw: this run's optimizer is sgd");
  f = saved;
  f.tensors.erase("optimizer." + last + ".exp_avg_sq");
  expect_refused(f, fresh_opt.get(), "optimizer state of '" + last + "' is incomplete: 1 of 2 tensors");
  f = saved;
  f.metadata["format"] = "something else";
  expect_refused(f, fresh_opt.get(), "format 'something else'");
  // Weights only (no optimizer): its state in the file is passed over.
  EXPECT_TRUE(checkpoint::restore(path, saved, *fresh.net, nullptr).ok());
  EXPECT_TRUE(values(*fresh.net) == values(*m.net));
}

// torchvision's ResNet-50 state_dict names, by its layout (not by mtc's model): conv1,
// bn1, layer1..4 of 3, 4, 6, 3 Bottlenecks (conv1-3, bn1-3, and downsample.0 / .1 in the
// first of each), fc; each batch norm with weight, bias, running_mean, running_var and
// PyTorch's num_batches_tracked (I64 []). A file of them laid out by the specification
// loads into mtc's ResNet-50 (weights only), each value where its name says.
// Rank files (docs/checkpoints.md, "Several ranks"): a main file naming 2 rank files; a
// tensor split along dimension 1 (5 columns: 3 on rank 0, 2 on rank 1) comes back whole,
// columns in rank order; each rank's own tensor by its name, marked "own". A rank file
// missing, of another save, or with a shard of the wrong shape is an error naming it.
TEST(Checkpoint, RankFilesAreAssembledIntoTheWholeState) {
  const std::string path = temp_path("ranked.st");
  auto f32 = [](Shape shape, std::vector<float> v) { return HostTensor{"F32", std::move(shape), bytes_of(v)}; };
  SafetensorsFile main;
  main.metadata = {{"format", checkpoint::kFormat}, {"rank_files", "2"}, {"rank_files_tag", "iter7"}};
  main.tensors["shared"] = f32({2}, {1, 2});
  auto rank = [&](int r) {
    SafetensorsFile f;
    f.metadata = {{"format", checkpoint::kFormat}, {"rank", absl::StrCat(r)}, {"rank_files_tag", "iter7"},
                  {"placement.w", "S(1)"}, {"global_shape.w", "[2,5]"}, {"placement.expert" + std::to_string(r), "own"}};
    f.tensors["w"] = r == 0 ? f32({2, 3}, {0, 1, 2, 5, 6, 7}) : f32({2, 2}, {3, 4, 8, 9});
    f.tensors["expert" + std::to_string(r)] = f32({1}, {10.f + r});
    return f;
  };
  ASSERT_TRUE(checkpoint::write_safetensors(path, main).ok());
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(checkpoint::write_safetensors(checkpoint::rank_file(path, "iter7", r), rank(r)).ok());
  EXPECT_EQ(checkpoint::rank_file(path, "iter7", 1), path + ".iter7.rank1");
  absl::StatusOr<SafetensorsFile> whole = checkpoint::read_checkpoint(path);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->tensors.size(), 4u);
  EXPECT_EQ(whole->tensors["w"].shape, (Shape{2, 5}));
  EXPECT_EQ(whole->tensors["w"].data, bytes_of(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(whole->tensors["expert1"].data, bytes_of(std::vector<float>{11}));
  EXPECT_EQ(whole->tensors["shared"].data, bytes_of(std::vector<float>{1, 2}));
  EXPECT_EQ(whole->metadata["placement.expert0"], "own");

  auto expect_error = [&](const std::string& what) {
    absl::StatusOr<SafetensorsFile> r = checkpoint::read_checkpoint(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status();
  };
  SafetensorsFile bad = rank(1);
  bad.metadata["rank_files_tag"] = "iter5";
  ASSERT_TRUE(checkpoint::write_safetensors(checkpoint::rank_file(path, "iter7", 1), bad).ok());
  expect_error("rank 1's file of save 'iter5': expected rank 1's of save 'iter7'");
  bad = rank(1);
  bad.tensors["w"] = f32({2, 3}, {3, 4, 0, 8, 9, 0});
  ASSERT_TRUE(checkpoint::write_safetensors(checkpoint::rank_file(path, "iter7", 1), bad).ok());
  expect_error("tensor 'w' is [2,3]: expected rank 1 of 2's shard [2,2] of [2,5]");
  std::filesystem::remove(checkpoint::rank_file(path, "iter7", 1));
  expect_error("rank 1 of 2's file");
  std::filesystem::remove(path);
  std::filesystem::remove(checkpoint::rank_file(path, "iter7", 0));
}

TEST(Checkpoint, TorchvisionResNet50NamesLoadIntoMtcsResNet50) {
  auto rt = make_test_runtime(false, size_t{1} << 30);
  models::Model m = *models::make_model("resnet50", {.num_classes = 1000});
  std::vector<std::pair<std::string, Shape>> names;
  auto bn = [&](const std::string& p, int64_t c) {
    for (const char* k : {"weight", "bias", "running_mean", "running_var"}) names.push_back({p + "." + k, {c}});
    names.push_back({p + ".num_batches_tracked", {}});
  };
  names.push_back({"conv1.weight", {64, 3, 7, 7}});
  bn("bn1", 64);
  const int blocks[4] = {3, 4, 6, 3};
  int64_t in = 64;
  for (int l = 0; l < 4; ++l) {
    const int64_t width = 64 << l, out = width * 4;
    for (int b = 0; b < blocks[l]; ++b) {
      const std::string p = "layer" + std::to_string(l + 1) + "." + std::to_string(b);
      names.push_back({p + ".conv1.weight", {width, in, 1, 1}});
      bn(p + ".bn1", width);
      names.push_back({p + ".conv2.weight", {width, width, 3, 3}});
      bn(p + ".bn2", width);
      names.push_back({p + ".conv3.weight", {out, width, 1, 1}});
      bn(p + ".bn3", out);
      if (b == 0) {
        names.push_back({p + ".downsample.0.weight", {out, in, 1, 1}});
        bn(p + ".downsample.1", out);
      }
      in = out;
    }
  }
  names.push_back({"fc.weight", {1000, 2048}});
  names.push_back({"fc.bias", {1000}});
  ASSERT_EQ(names.size(), 320u) << "torchvision's resnet50().state_dict() has 320 entries";
  // The header and buffer by hand; tensor k's elements are k + i * 1e-6.
  std::string header = "{", buffer;
  for (size_t k = 0; k < names.size(); ++k) {
    const auto& [name, shape] = names[k];
    const bool counter = name.ends_with("num_batches_tracked");
    std::string bytes;
    if (counter) {
      bytes = bytes_of(std::vector<int64_t>{100});
    } else {
      std::vector<float> v(numel(shape));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(k) + static_cast<float>(i) * 1e-6f;
      bytes = bytes_of(v);
    }
    absl::StrAppend(&header, k ? "," : "", "\"", name, "\":{\"dtype\":\"", counter ? "I64" : "F32",
                    "\",\"shape\":[", absl::StrJoin(shape, ","), "],\"data_offsets\":[", buffer.size(), ",",
                    buffer.size() + bytes.size(), "]}");
    buffer += bytes;
  }
  header += "}";
  const std::string path = temp_path("resnet50.safetensors");
  spit(path, by_hand(header, buffer));
  absl::StatusOr<SafetensorsFile> f = checkpoint::read_safetensors(path);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::Status s = checkpoint::restore(path, *f, *m.net, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  int checked = 0;
  for (const nn::NamedTensors& list : {m.net->named_parameters(), m.net->named_buffers()}) {
    for (const auto& [name, t] : list) {
      size_t k = 0;
      while (k < names.size() && names[k].first != name) ++k;
      ASSERT_LT(k, names.size()) << "mtc's " << name << " is not a torchvision name";
      const std::vector<float> v = *t.to_vector();
      EXPECT_EQ(v.front(), static_cast<float>(k)) << name;
      EXPECT_EQ(v.back(), static_cast<float>(k) + static_cast<float>(v.size() - 1) * 1e-6f) << name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 320 - 53) << "every torchvision tensor but the 53 batch counters";
  std::remove(path.c_str());
}

}  // namespace
}  // namespace mtc
