# cmake --install: the runtime as a package (docs/library.md). libmtc, libmtc_comm and the
# static libraries libmtc links publicly (alloc, evict, partition), the plug-ins beside
# them (MPI, NCCL, CUDA: loaded by name from the same folder, never linked), the public
# headers (include/mtc/ and the partition/ headers they include), and mtcConfig.cmake, so
# that a project does find_package(mtc) and target_link_libraries(app mtc::mtc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS mtc mtc_alloc mtc_evict mtc_partition mtc_comm EXPORT mtcTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(MTC_PLUGINS)
  install(TARGETS ${MTC_PLUGINS} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# Installed, libmtc finds libmtc_comm, and a plug-in both, in their own folder.
set_target_properties(mtc mtc_comm ${MTC_PLUGINS} PROPERTIES INSTALL_RPATH "$ORIGIN")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mtc DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/partition/placement.h ${PROJECT_SOURCE_DIR}/partition/cost.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/partition)
install(EXPORT mtcTargets NAMESPACE mtc:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mtc)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mtcConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/mtcConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mtc)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/mtcConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mtcConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/mtcConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mtc)
