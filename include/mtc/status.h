// Error handling for mtc, in three tiers (as PyTorch's allocator does):
//  - errors a user can cause come back as absl::Status, naming the op, shapes and sizes;
//  - broken internal invariants stop the process at once with file:line (MTC_CHECK);
//  - debug-only checks (MTC_DCHECK) compile away in Release.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mtc::internal {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const std::string& msg) {
  std::fprintf(stderr, "mtc internal error at %s:%d: check '%s' failed%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace mtc::internal

// MTC_CHECK(cond, ...): an internal invariant. The optional arguments are StrCat'ed.
#define MTC_CHECK(cond, ...)                                                               \
  do {                                                                                     \
    if (!(cond)) [[unlikely]]                                                              \
      ::mtc::internal::check_failed(__FILE__, __LINE__, #cond, ::absl::StrCat(__VA_ARGS__)); \
  } while (0)

#ifdef NDEBUG
#define MTC_DCHECK(cond, ...) \
  do {                        \
  } while (0)
#else
#define MTC_DCHECK(cond, ...) MTC_CHECK(cond, __VA_ARGS__)
#endif

#define MTC_CONCAT_INNER(a, b) a##b
#define MTC_CONCAT(a, b) MTC_CONCAT_INNER(a, b)

// MTC_RETURN_IF_ERROR(expr): returns expr's status from the enclosing function if not ok.
#define MTC_RETURN_IF_ERROR(expr)                      \
  do {                                                 \
    ::absl::Status mtc_status_ = (expr);               \
    if (!mtc_status_.ok()) [[unlikely]] return mtc_status_; \
  } while (0)

// MTC_ASSIGN_OR_RETURN(lhs, expr): unwraps an absl::StatusOr or returns its status.
#define MTC_ASSIGN_OR_RETURN(lhs, expr) \
  MTC_ASSIGN_OR_RETURN_IMPL(MTC_CONCAT(mtc_statusor_, __LINE__), lhs, expr)
#define MTC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) [[unlikely]] return tmp.status(); \
  lhs = std::move(tmp).value()
