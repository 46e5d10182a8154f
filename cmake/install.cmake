# What `cmake --install` (and `make install PREFIX=...`) puts where, and the Debian package
# (`cpack -G DEB` in the build directory, or `make package`).
include(CMakePackageConfigHelpers)

install(TARGETS nvtcp RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS nvtcp_shared nvtcp_static EXPORT nvtcpTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/nvtcp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT development FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_SOURCE_DIR}/apps/nvtcp/bench_report.py DESTINATION ${CMAKE_INSTALL_DATADIR}/nvtcp
        RENAME nvtcp_bench_report.py COMPONENT runtime)

# find_package(nvtcp) -> nvtcp::nvtcp (shared) and nvtcp::nvtcp_static.
set(NVTCP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/nvtcp)
install(EXPORT nvtcpTargets NAMESPACE nvtcp:: DESTINATION ${NVTCP_CMAKE_DIR} COMPONENT development)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/nvtcpConfig.cmake.in
  ${PROJECT_BINARY_DIR}/nvtcpConfig.cmake INSTALL_DESTINATION ${NVTCP_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/nvtcpConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/nvtcpConfig.cmake ${PROJECT_BINARY_DIR}/nvtcpConfigVersion.cmake
        DESTINATION ${NVTCP_CMAKE_DIR} COMPONENT development)

# pkg-config: `pkg-config --cflags --libs nvtcp` (add --static for libnvtcp.a). The paths are
# relative to the .pc file's own place, so a tree installed under any prefix (or moved) works.
file(RELATIVE_PATH NVTCP_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" NVTCP_PC_TO_PREFIX "${NVTCP_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/nvtcp.pc.in ${PROJECT_BINARY_DIR}/nvtcp.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/nvtcp.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT development)

# The target as a service: nvtcp-target.service runs `nvtcp target --config /etc/nvtcp/target.json`.
# Both land where the install prefix says at install time (prefix /usr: /etc/nvtcp and
# /usr/lib/systemd/system, as Debian has them; any other prefix: under it), so the unit's
# ExecStart names the nvtcp that was installed with it.
install(CODE "set(NVTCP_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
              set(NVTCP_BINARY_DIR \"${PROJECT_BINARY_DIR}\")
              set(NVTCP_BINDIR \"${CMAKE_INSTALL_BINDIR}\")" COMPONENT runtime)
install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/install_service.cmake COMPONENT runtime)

# The Debian package: one package with everything (binaries, library, headers, fio engine,
# service). dpkg-shlibdeps works out the library dependencies.
set(CPACK_PACKAGE_NAME nvtcp)
set(CPACK_PACKAGE_VENDOR "nvtcp")
set(CPACK_PACKAGE_CONTACT "nvtcp maintainers <nvtcp@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "userspace NVMe-over-TCP target, host library, offload engine and benchmark")
set(CPACK_PACKAGE_DESCRIPTION "nvtcp serves NULL, RAM and file namespaces over NVMe/TCP (nvtcp target, also as\n\
the nvtcp-target service), and connects to NVMe/TCP controllers with libnvtcp, the fio\n\
ioengine libnvtcp_fio.so and the nvtcp discover, identify, perf and bench tools.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)  # what the install runs with under CPACK_SET_DESTDIR
# install_service.cmake reads the prefix the package installs to; DESTDIR staging gives it /usr.
set(CPACK_SET_DESTDIR ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# shlibs for packages that link libnvtcp, and the ldconfig trigger.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "fio, nvme-cli")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
