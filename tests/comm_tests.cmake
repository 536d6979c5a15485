# comm/'s tests. comm_local_test and comm_nccl_test are plain gtests (globbed by
# CMakeLists.txt with mtc and gtest_main); they call comm/ directly, so they get mtc_comm
# here too. comm_mpitest (its own main) runs the MPI backend under mpirun with 1, 2, 4
# and 8 ranks, one ctest entry per world size (comm_mpitest_np1 ... np8).
foreach(t comm_local_test comm_nccl_test)
  if(TARGET ${t})
    target_link_libraries(${t} PRIVATE mtc_comm)
  endif()
endforeach()
# comm_nccl_test makes its device buffers with the CUDA runtime itself (the NCCL backend
# is a plug-in that links it; libmtc_comm does not).
if(MTC_HAVE_NCCL AND TARGET comm_nccl_test)
  target_include_directories(comm_nccl_test PRIVATE ${MTC_NCCL_INCLUDE})
  target_link_libraries(comm_nccl_test PRIVATE CUDA::cudart)
endif()

if(MTC_HAVE_MPI)
  add_executable(comm_mpitest ${CMAKE_CURRENT_SOURCE_DIR}/comm_mpitest.cc)
  target_link_libraries(comm_mpitest PRIVATE mtc_comm GTest::gtest MPI::MPI_CXX)
  set(MTC_COMM_MPITEST_ENV
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)
  if(MTC_SANITIZE MATCHES "address")
    # Open MPI leaks its own start-up allocations at MPI_Finalize; LeakSanitizer would
    # fail every rank on them. Only these entries turn leak detection off.
    list(APPEND MTC_COMM_MPITEST_ENV ASAN_OPTIONS=detect_leaks=0)
  endif()
  foreach(np 1 2 4 8)
    add_test(NAME comm_mpitest_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:comm_mpitest>)
    set_tests_properties(comm_mpitest_np${np} PROPERTIES ENVIRONMENT "${MTC_COMM_MPITEST_ENV}" TIMEOUT 300)
  endforeach()
endif()
