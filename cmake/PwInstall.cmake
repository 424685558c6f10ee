# `cmake --install build --prefix P` gives P/lib/libpipewright.so, P/include/pipewright/*.h,
# P/bin/pipewright (the CLI and launcher) and P/lib/cmake/pipewright/ with the package config, so
# a program outside this tree does find_package(pipewright) and links pipewright::pipewright.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PW_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/pipewright)
install(TARGETS pw_library EXPORT pipewrightTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS pipewright RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/pipewright DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/pipewright/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pipewright)
install(EXPORT pipewrightTargets NAMESPACE pipewright:: DESTINATION ${PW_PACKAGE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/pipewrightConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/pipewrightConfig.cmake
                              INSTALL_DESTINATION ${PW_PACKAGE_DIR}
                              PATH_VARS CMAKE_INSTALL_BINDIR)
# 0.x: a minor version may change the API, so only the same major.minor satisfies a request.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/pipewrightConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/pipewrightConfig.cmake ${PROJECT_BINARY_DIR}/pipewrightConfigVersion.cmake
        DESTINATION ${PW_PACKAGE_DIR})
