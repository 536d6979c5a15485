// LrSchedule: linear warm-up, then a constant, step or cosine learning rate, by the
// iteration alone (include/mtc/optim.h gives the formulas).
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mtc/optim.h"

namespace mtc::optim {

absl::StatusOr<LrSchedule::Kind> parse_schedule_kind(const std::string& name) {
  if (name == "constant") return LrSchedule::Kind::kConstant;
  if (name == "step") return LrSchedule::Kind::kStep;
  if (name == "cosine") return LrSchedule::Kind::kCosine;
  return absl::InvalidArgumentError(absl::StrCat("learning-rate schedule '", name, "': expected constant, step or cosine"));
}

absl::Status LrSchedule::check() const {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (!(base >= 0) || !std::isfinite(base)) return bad(absl::StrCat("learning rate ", base, ": expected >= 0"));
  if (warmup < 0) return bad(absl::StrCat("warm-up of ", warmup, " iterations: expected >= 0"));
  if (kind == Kind::kStep) {
    if (step_size < 1) return bad(absl::StrCat("step schedule every ", step_size, " iterations: expected >= 1"));
    if (!(gamma > 0 && gamma <= 1)) return bad(absl::StrCat("step schedule's factor ", gamma, ": expected in (0, 1]"));
  }
  if (kind == Kind::kCosine) {
    if (!(min >= 0 && min <= base)) {
      return bad(absl::StrCat("cosine schedule's end rate ", min, ": expected in [0, ", base, "]"));
    }
    if (total - warmup < 1) {
      return bad(absl::StrCat("cosine schedule over ", total, " iterations with ", warmup,
                              " of warm-up: expected iterations after the warm-up"));
    }
  }
  return absl::OkStatus();
}

float LrSchedule::at(int64_t t) const {
  if (t <= warmup) return static_cast<float>(static_cast<double>(base) * t / warmup);
  const int64_t s = t - warmup - 1;
  switch (kind) {
    case Kind::kConstant: return base;
    case Kind::kStep: return static_cast<float>(base * std::pow(static_cast<double>(gamma), s / step_size));
    case Kind::kCosine: {
      const double c = std::cos(std::numbers::pi * static_cast<double>(s) / static_cast<double>(total - warmup));
      return static_cast<float>(min + (static_cast<double>(base) - min) * (1 + c) / 2);
    }
  }
  return base;
}

std::string LrSchedule::describe() const {
  std::string what;
  switch (kind) {
    case Kind::kConstant: what = absl::StrFormat("constant %g", base); break;
    case Kind::kStep: what = absl::StrFormat("%g, times %g every %d iterations", base, gamma, step_size); break;
    case Kind::kCosine:
      what = absl::StrFormat("cosine from %g to %g over %d iterations", base, min, total - warmup);
      break;
  }
  if (warmup > 0) absl::StrAppend(&what, absl::StrFormat(" after %d of linear warm-up", warmup));
  return what;
}

}  // namespace mtc::optim
