// The safetensors format: reading a file with every check the format allows, and writing
// one atomically (a temporary file, flushed, then renamed over the target).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mtc/checkpoint.h"
#include "nlohmann/json.hpp"

namespace mtc::checkpoint {
namespace {

// A header longer than this is refused before it is read: no real header comes near it
// (a million tensors' entries), and a corrupt length must not become a huge allocation.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

absl::Status bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "': ", what));
}

std::string os_error() { return std::strerror(errno); }

}  // namespace

int dtype_bytes(const std::string& dtype) {
  if (dtype == "BOOL" || dtype == "U8" || dtype == "I8" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  if (dtype == "I16" || dtype == "U16" || dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "I32" || dtype == "U32" || dtype == "F32") return 4;
  if (dtype == "I64" || dtype == "U64" || dtype == "F64") return 8;
  return 0;
}

absl::StatusOr<SafetensorsFile> read_safetensors(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return bad(path, "is a folder: expected a safetensors file");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int e = errno;
    const std::string why = std::strerror(e);
    if (e == ENOENT) return absl::NotFoundError(absl::StrCat("checkpoint '", path, "': no such file"));
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "': cannot be opened: ", why));
  }
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (size < 8) return bad(path, absl::StrCat(size, " bytes: expected at least the 8-byte header length"));
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len_bytes[i];  // little-endian
  if (n > kMaxHeaderBytes || n > size - 8) {
    return bad(path, absl::StrCat("header length ", n, " with ", size - 8,
                                  " bytes after it: expected a header that fits the file (truncated or not safetensors)"));
  }
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad(path, "the header is not a JSON object: expected safetensors");
  const uint64_t buffer = size - 8 - n;
  SafetensorsFile f;
  // (begin, end, name) of every tensor, to check that they tile the buffer.
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> spans;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) return bad(path, "__metadata__ is not an object of strings");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) return bad(path, absl::StrCat("__metadata__ '", m.key(), "' is not a string"));
        f.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets") ||
        !e["dtype"].is_string() || !e["shape"].is_array() || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      return bad(path, where + ": expected {\"dtype\", \"shape\", \"data_offsets\": [begin, end]}");
    }
    HostTensor t;
    t.dtype = e["dtype"].get<std::string>();
    const int eb = dtype_bytes(t.dtype);
    if (eb == 0) return bad(path, absl::StrCat(where, ": dtype '", t.dtype, "' is not a safetensors dtype"));
    uint64_t elems = 1;
    for (const nlohmann::json& d : e["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
        return bad(path, where + ": a shape of whole numbers >= 0 expected");
      }
      const uint64_t v = d.get<uint64_t>();
      if (v != 0 && elems > (uint64_t{1} << 62) / v) return bad(path, where + ": shape too large");
      elems *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    const nlohmann::json& o = e["data_offsets"];
    if (!o[0].is_number_unsigned() || !o[1].is_number_unsigned()) {
      return bad(path, where + ": data_offsets of whole numbers >= 0 expected");
    }
    const uint64_t b = o[0].get<uint64_t>(), en = o[1].get<uint64_t>();
    if (b > en || en > buffer) {
      return bad(path, absl::StrCat(where, ": data_offsets [", b, ", ", en, "] outside the ", buffer,
                                    "-byte data buffer (truncated file?)"));
    }
    if (en - b != elems * static_cast<uint64_t>(eb)) {
      return bad(path, absl::StrCat(where, ": ", en - b, " bytes for ", t.dtype, " ", shape_str(t.shape),
                                    ": expected ", elems * eb));
    }
    spans.emplace_back(b, en, name);
    t.data.resize(en - b);
    in.seekg(static_cast<std::streamoff>(8 + n + b));
    in.read(t.data.data(), static_cast<std::streamsize>(en - b));
    if (!in) return bad(path, where + ": its bytes could not be read");
    f.tensors.emplace(name, std::move(t));
  }
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (const auto& [b, e, name] : spans) {
    if (b != at) {
      return bad(path, absl::StrCat("tensor '", name, "' starts at byte ", b, " of the data buffer where ", at,
                                    " was expected (", b < at ? "overlap" : "gap", ")"));
    }
    at = e;
  }
  if (at != buffer) {
    return bad(path, absl::StrCat("the data buffer holds ", buffer, " bytes and its tensors ", at,
                                  ": expected them to cover it"));
  }
  return f;
}

absl::Status write_safetensors(const std::string& path, const SafetensorsFile& file, const WriteOptions& o) {
  nlohmann::json j = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    const int eb = dtype_bytes(t.dtype);
    if (eb == 0) return bad(path, absl::StrCat("tensor '", name, "': dtype '", t.dtype, "' is not a safetensors dtype"));
    if (static_cast<uint64_t>(numel(t.shape)) * eb != t.data.size()) {
      return bad(path, absl::StrCat("tensor '", name, "': ", t.data.size(), " bytes for ", t.dtype, " ",
                                    shape_str(t.shape)));
    }
    j[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!file.metadata.empty()) j["__metadata__"] = file.metadata;
  std::string header = j.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the format's writer does
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return bad(path, absl::StrCat("cannot create '", tmp, "': ", os_error()));
  auto fail = [&](const std::string& what) {
    const std::string why = os_error();
    ::close(fd);
    ::unlink(tmp.c_str());
    return bad(path, absl::StrCat(what, " '", tmp, "': ", why));
  };
  auto put = [&](const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  };
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  if (!put(reinterpret_cast<const char*>(len), 8) || !put(header.data(), header.size())) return fail("writing");
  uint64_t written = 0;
  bool halfway_done = !o.halfway;
  for (const auto& [name, t] : file.tensors) {
    if (!put(t.data.data(), t.data.size())) return fail("writing");
    written += t.data.size();
    if (!halfway_done && 2 * written >= offset) {
      halfway_done = true;
      o.halfway();
    }
  }
  if (!halfway_done) o.halfway();
  if (::fsync(fd) != 0) return fail("flushing");
  if (::close(fd) != 0) {
    const std::string why = os_error();
    ::unlink(tmp.c_str());
    return bad(path, absl::StrCat("closing '", tmp, "': ", why));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = os_error();
    ::unlink(tmp.c_str());
    return bad(path, absl::StrCat("renaming '", tmp, "' to it: ", why));
  }
  return absl::OkStatus();
}

}  // namespace mtc::checkpoint
