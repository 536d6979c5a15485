// omp_defaults.cc: OpenMP's wait policy for mtc's tools (cli.h, passive_omp_wait). libgomp's
// threads spin while they wait for work or at a barrier (GOMP_SPINCOUNT, 300000 turns by
// default); with every core in use, a spinning thread holds a core that another thread of
// the same parallel region needs, and a run slowed several-fold when another process held
// one of the cores (docs/cpu.md has the figures). libgomp reads OMP_WAIT_POLICY once, in its
// own initializer, before main() runs and before the C library has made the environment
// writable for an executable's own early hooks, so the one dependable way to set it is to
// start the program again with it set.
#include <unistd.h>

#include <cstdlib>

#include "cli.h"

namespace mtc::cli {

void passive_omp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/1);
  ::execv("/proc/self/exe", argv);
  // No /proc, or the exec failed: run on with the variable set for any child, and the
  // threads spinning as before.
}

}  // namespace mtc::cli
