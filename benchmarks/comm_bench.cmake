# mtc-bench-comm: comm/'s collectives over message sizes, nccl-tests' columns, and the
# alpha-beta fit DTP's cost model reads (docs/comm.md). Needs only mtc_comm, not the runtime.
add_executable(mtc_bench_comm ${CMAKE_CURRENT_SOURCE_DIR}/mtc_bench_comm.cc)
set_target_properties(mtc_bench_comm PROPERTIES OUTPUT_NAME mtc-bench-comm)
target_link_libraries(mtc_bench_comm PRIVATE mtc_comm mtc_cli absl::flags absl::flags_parse absl::strings
                                              absl::str_format nlohmann_json::nlohmann_json)
# It calls MPI itself (the slowest rank's time) and, with NCCL, the CUDA runtime (its
# device buffers): the backends themselves are plug-ins libmtc_comm does not link.
if(MTC_HAVE_MPI)
  target_link_libraries(mtc_bench_comm PRIVATE MPI::MPI_CXX)
endif()
if(MTC_HAVE_NCCL)
  target_link_libraries(mtc_bench_comm PRIVATE CUDA::cudart)
endif()
