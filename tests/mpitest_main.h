// The main() of the multi-rank GoogleTest programs (dist_mpitest, convert_mpitest,
// dtp_mpitest): MPI start-up, one communicator for the tests (MPI under mpirun, else the
// local backend, with or without the collectives' argument check), a runtime of
// `memory` bytes with one thread, one rank's report, and a status that fails on every
// rank when a test failed on any. Include it once, from the test program's .cc.
#pragma once

#include <cstdio>
#include <string>

#include "comm/communicator.h"
#include "gtest/gtest.h"
#include "mtc/distributed.h"
#include "mtc/runtime.h"

namespace mtc::testing_main {

// run: the whole main(); `comm`, `rank` and `size` are the test program's globals.
inline int run(int argc, char** argv, const char* name, bool check_arguments, size_t memory, dist::CommPtr& comm,
               int& rank, int& size) {
  if (absl::Status s = comm::init(&argc, &argv); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, std::string(s.message()).c_str());
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  comm::CommOptions co;
  co.backend = comm::mpi_initialized() ? comm::Backend::kMpi : comm::Backend::kLocal;
  co.check_arguments = check_arguments;
  auto c = comm::create(co);
  if (!c.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, std::string(c.status().message()).c_str());
    return 1;
  }
  comm = *c;
  rank = comm->rank();
  size = comm->world_size();
  if (rank != 0) {  // one rank's report; failures still count on every rank below
    ::testing::TestEventListeners& l = ::testing::UnitTest::GetInstance()->listeners();
    delete l.Release(l.default_result_printer());
  }
  int failed = 0;
  {
    RuntimeOptions o;
    o.memory_bytes = memory;
    o.num_threads = 1;
    auto rt = Runtime::create(o);
    if (!rt.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, std::string(rt.status().message()).c_str());
      return 1;
    }
    failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  }
  int any = 0;
  if (absl::Status s = comm->all_reduce(&failed, &any, 1, comm::DataType::kI32, comm::ReduceOp::kMax)->wait(); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, std::string(s.message()).c_str());
    any = 1;
  }
  if (failed) std::fprintf(stderr, "%s: rank %d failed\n", name, rank);
  comm.reset();
  comm::finalize();
  return any;
}

}  // namespace mtc::testing_main
