# The runtime's multi-rank tests (included from tests/CMakeLists.txt): the collective ops,
# synchronised batch norm and DataParallel (dist_mpitest, under mpirun with 1, 2, 4 and 8
# ranks), data-parallel training against one rank (dp_equivalence.sh), DTP with each rank's
# batch-norm statistics against data parallel (dtp_bn_stats.sh), a rank's failure
# stopping the job (dp_failure.sh), and what a user meets under mpirun: traces, flag errors,
# default threads and memory (mpirun_front_door.sh), SPOS and moe_gpt on 4 ranks with and
# without a DTE budget (dynamic_dp.sh). world_test reads launch/'s world.cc.
if(TARGET world_test)
  target_link_libraries(world_test PRIVATE mtc_cli)
endif()
# convert_mpitest: DTP's placement conversions (src/dist/convert_ops.h), alone on the local
# backend here and on 2, 3 and 4 ranks below; the _broken runs set
# MTC_TESTING_BREAK_CONVERT_BACKWARD=all_gather, and the gradient check must notice.
add_executable(convert_mpitest convert_mpitest.cc)
target_include_directories(convert_mpitest PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(convert_mpitest PRIVATE mtc GTest::gtest)
add_test(NAME convert_mpitest_local COMMAND $<TARGET_FILE:convert_mpitest>)
set_tests_properties(convert_mpitest_local PROPERTIES TIMEOUT 300)
if(NOT MTC_HAVE_MPI)
  message(STATUS "  multi-rank tests: skipped (no MPI)")
  return()
endif()
set(MTC_MPI_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
if(MTC_SANITIZE)
  # Open MPI keeps some of its allocations until exit; LeakSanitizer would report them.
  list(APPEND MTC_MPI_ENV "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1")
endif()
add_executable(dist_mpitest dist_mpitest.cc)
target_include_directories(dist_mpitest PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(dist_mpitest PRIVATE mtc GTest::gtest MPI::MPI_CXX)
foreach(np 1 2 4 8)
  add_test(NAME dist_mpitest_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:dist_mpitest>)
  set_tests_properties(dist_mpitest_np${np} PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 300)
endforeach()
# A mixture of experts spread over the ranks with every token routed to one expert: the
# ranks whose experts receive nothing must not hang (60 s).
foreach(np 2 4)
  add_test(NAME moe_ep_forced_routing_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:dist_mpitest>
                   --gtest_filter=MoeExpertParallel.*)
  set_tests_properties(moe_ep_forced_routing_np${np} PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 60)
endforeach()
foreach(np 2 3 4)
  add_test(NAME convert_mpitest_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:convert_mpitest>)
  set_tests_properties(convert_mpitest_np${np} PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 300)
endforeach()
foreach(np 2 3)
  add_test(NAME convert_mpitest_broken_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} -x MTC_TESTING_BREAK_CONVERT_BACKWARD
                   $<TARGET_FILE:convert_mpitest> --gtest_filter=ConvertBackward.*)
  set_tests_properties(convert_mpitest_broken_np${np} PROPERTIES
                       ENVIRONMENT "${MTC_MPI_ENV};MTC_TESTING_BREAK_CONVERT_BACKWARD=all_gather" TIMEOUT 300)
endforeach()
add_test(NAME mpirun_front_door
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpirun_front_door.sh $<TARGET_FILE:mtc-train>
                 $<TARGET_FILE:mtc-replay> ${MPIEXEC_EXECUTABLE})
set_tests_properties(mpirun_front_door PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 600)
foreach(script dp_equivalence dp_failure dtp_bn_stats)
  add_test(NAME ${script} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${script}.sh $<TARGET_FILE:mtc-train>
                                  ${MPIEXEC_EXECUTABLE})
  set_tests_properties(${script} PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 600)
endforeach()
# resume_np2.sh: 10 iterations, a checkpoint and 10 more equal 20 in one job, bit for bit (1 and 2 ranks).
add_test(NAME resume_np2 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/resume_np2.sh $<TARGET_FILE:mtc-train>
                                 $<TARGET_FILE:mtc-ckpt> ${MPIEXEC_EXECUTABLE})
set_tests_properties(resume_np2 PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 600)
# chrome_trace_np2.sh: each rank's Chrome trace, its collectives on the comm track, drawn by mtc-memplot.
add_test(NAME chrome_trace_np2 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/chrome_trace_np2.sh $<TARGET_FILE:mtc-train>
                                       $<TARGET_FILE:mtc-memplot> ${MPIEXEC_EXECUTABLE})
set_tests_properties(chrome_trace_np2 PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 600)
foreach(model spos moe_gpt)
  add_test(NAME dynamic_dp_${model} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dynamic_dp.sh $<TARGET_FILE:mtc-train>
                                         ${MPIEXEC_EXECUTABLE} ${model})
  set_tests_properties(dynamic_dp_${model} PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 600)
endforeach()
# dtp_mpitest: DTP's dispatch, pins, sharding and the placement check, on 1 to 4 ranks;
# dtp_equivalence.sh: every forced mode, auto and a mesh of mtc-train against one rank, one test per model.
add_executable(dtp_mpitest dtp_mpitest.cc)
target_include_directories(dtp_mpitest PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(dtp_mpitest PRIVATE mtc GTest::gtest MPI::MPI_CXX)
foreach(np 1 2 3 4)
  add_test(NAME dtp_mpitest_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:dtp_mpitest>)
  set_tests_properties(dtp_mpitest_np${np} PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 300)
endforeach()
foreach(model mlp resnet20 vgg16 gpt)
  add_test(NAME dtp_equivalence_${model}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dtp_equivalence.sh $<TARGET_FILE:mtc-train>
                   ${MPIEXEC_EXECUTABLE} ${model})
  set_tests_properties(dtp_equivalence_${model} PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 1200)
endforeach()
# dtp_auto_mpitest: --dtp=auto's planner (equal to one rank, settling, the cache, the
# budget, decisions compared under comm_check), on 1 to 4 ranks.
add_executable(dtp_auto_mpitest dtp_auto_mpitest.cc)
target_include_directories(dtp_auto_mpitest PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(dtp_auto_mpitest PRIVATE mtc GTest::gtest MPI::MPI_CXX)
foreach(np 1 2 3 4)
  add_test(NAME dtp_auto_mpitest_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:dtp_auto_mpitest>)
  set_tests_properties(dtp_auto_mpitest_np${np} PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 300)
endforeach()
# dtp_mesh_mpitest: DTP's mesh (partition groups of t ranks, data parallel across them:
# make_mesh, GradReducer over a mesh, refresh), every t dividing 1 to 4 ranks.
add_executable(dtp_mesh_mpitest dtp_mesh_mpitest.cc)
target_include_directories(dtp_mesh_mpitest PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(dtp_mesh_mpitest PRIVATE mtc GTest::gtest MPI::MPI_CXX)
foreach(np 1 2 3 4)
  add_test(NAME dtp_mesh_mpitest_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${np} $<TARGET_FILE:dtp_mesh_mpitest>)
  set_tests_properties(dtp_mesh_mpitest_np${np} PROPERTIES ENVIRONMENT "${MTC_MPI_ENV}" TIMEOUT 300)
endforeach()
