# SPDX-License-Identifier: Apache-2.0
# What `cmake --install` (and `make install PREFIX=...`) puts where, and the Debian package
# (`cpack -G DEB` in the build directory, or `make package`).
include(CMakePackageConfigHelpers)

install(TARGETS nvtcp RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
install(TARGETS nvtcp_shared nvtcp_static EXPORT nvtcpTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT libs NAMELINK_COMPONENT dev
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/nvtcp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_SOURCE_DIR}/apps/nvtcp/bench_report.py DESTINATION ${CMAKE_INSTALL_DATADIR}/nvtcp
        RENAME nvtcp_bench_report.py COMPONENT tools)

# find_package(nvtcp) -> nvtcp::nvtcp (shared) and nvtcp::nvtcp_static.
set(NVTCP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/nvtcp)
install(EXPORT nvtcpTargets NAMESPACE nvtcp:: DESTINATION ${NVTCP_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/nvtcpConfig.cmake.in
  ${PROJECT_BINARY_DIR}/nvtcpConfig.cmake INSTALL_DESTINATION ${NVTCP_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/nvtcpConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/nvtcpConfig.cmake ${PROJECT_BINARY_DIR}/nvtcpConfigVersion.cmake
        DESTINATION ${NVTCP_CMAKE_DIR} COMPONENT dev)

# pkg-config: `pkg-config --cflags --libs nvtcp` (add --static for libnvtcp.a). The paths are
# relative to the .pc file's own place, so a tree installed under any prefix (or moved) works.
file(RELATIVE_PATH NVTCP_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" NVTCP_PC_TO_PREFIX "${NVTCP_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/nvtcp.pc.in ${PROJECT_BINARY_DIR}/nvtcp.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/nvtcp.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The target as a service: nvtcp-target.service runs `nvtcp target --config /etc/nvtcp/target.json`.
# Both land where the install prefix says at install time (prefix /usr: /etc/nvtcp and
# /usr/lib/systemd/system, as Debian has them; any other prefix: under it), so the unit's
# ExecStart names the nvtcp that was installed with it.
install(CODE "set(NVTCP_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
              set(NVTCP_BINARY_DIR \"${PROJECT_BINARY_DIR}\")
              set(NVTCP_BINDIR \"${CMAKE_INSTALL_BINDIR}\")" COMPONENT tools)
install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/install_service.cmake COMPONENT tools)

# The Debian packages, one per component, as Debian splits a library:
# - nvtcp (tools): the nvtcp binary (target, discover, identify, perf, bench), the fio engine,
#   the nvtcp-target service and its configuration (a conffile);
# - libnvtcp0 (libs): the shared host library, all an application linked against it needs;
# - libnvtcp-dev (dev): headers, libnvtcp.so, libnvtcp.a, the CMake package and nvtcp.pc; it
#   depends on libnvtcp0 of the same version.
# A server that only runs the target installs nvtcp alone (the binary links the library
# statically). dpkg-shlibdeps works out each package's library dependencies.
# Manual pages for nvtcp and each subcommand, made by help2man from the CLI's own --help at build
# time (packaging/man/make-man-pages.sh), and bash completion; both go with the nvtcp package.
find_program(NVTCP_HELP2MAN help2man)
if(NVTCP_HELP2MAN)
  set(NVTCP_MAN_PAGES)
  foreach(page IN ITEMS nvtcp nvtcp-target nvtcp-discover nvtcp-identify nvtcp-perf nvtcp-bench nvtcp-engine nvtcp-rpc)
    list(APPEND NVTCP_MAN_PAGES ${PROJECT_BINARY_DIR}/man/${page}.1.gz)
  endforeach()
  add_custom_command(OUTPUT ${NVTCP_MAN_PAGES}
    COMMAND bash ${PROJECT_SOURCE_DIR}/packaging/man/make-man-pages.sh $<TARGET_FILE:nvtcp> ${PROJECT_BINARY_DIR}/man
            ${PROJECT_VERSION} ${PROJECT_SOURCE_DIR}/packaging/debian/changelog
    DEPENDS nvtcp ${PROJECT_SOURCE_DIR}/packaging/man/make-man-pages.sh ${PROJECT_SOURCE_DIR}/packaging/debian/changelog
    COMMENT "Manual pages from nvtcp --help (help2man)" VERBATIM)
  add_custom_target(nvtcp_man ALL DEPENDS ${NVTCP_MAN_PAGES})
  install(FILES ${NVTCP_MAN_PAGES} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT tools)
else()
  message(STATUS "help2man not found: no manual pages in the install or the package (make deps installs it)")
endif()
install(FILES ${PROJECT_SOURCE_DIR}/packaging/bash-completion/nvtcp
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions COMPONENT tools)

# Each package carries the project's licence (Apache-2.0) as a machine-readable Debian copyright
# file and the Debian changelog, in /usr/share/doc/<package>, and its binaries are stripped:
# Debian 12's lintian reports no error on the three (package.lintian checks).
execute_process(COMMAND gzip -9nc ${PROJECT_SOURCE_DIR}/packaging/debian/changelog
                OUTPUT_FILE ${PROJECT_BINARY_DIR}/changelog.Debian.gz RESULT_VARIABLE NVTCP_GZIP_RC)
if(NOT NVTCP_GZIP_RC EQUAL 0)
  message(FATAL_ERROR "gzip of packaging/debian/changelog failed")
endif()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/packaging/debian/changelog)
foreach(pkg_component IN ITEMS "nvtcp;tools" "libnvtcp0;libs" "libnvtcp-dev;dev")
  list(GET pkg_component 0 pkg)
  list(GET pkg_component 1 component)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/debian/copyright ${PROJECT_BINARY_DIR}/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${pkg} COMPONENT ${component})
endforeach()

set(CPACK_PACKAGE_NAME nvtcp)
set(CPACK_PACKAGE_VENDOR "nvtcp")
set(CPACK_PACKAGE_CONTACT "nvtcp maintainers <maintainers@nvtcp.io>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)  # what the install runs with under CPACK_SET_DESTDIR
# install_service.cmake reads the prefix the package installs to; DESTDIR staging gives it /usr.
set(CPACK_SET_DESTDIR ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL tools libs dev)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_COMPONENT_DEV_DEPENDS libs)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME nvtcp)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION net)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SUGGESTS "fio, nvme-cli")
set(CPACK_DEBIAN_TOOLS_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/conffiles)
set(CPACK_DEBIAN_TOOLS_DESCRIPTION "userspace NVMe-over-TCP target, tools, fio engine and benchmark
nvtcp serves NULL, RAM and file namespaces over NVMe/TCP (nvtcp target, also
as the nvtcp-target service), and connects to NVMe/TCP controllers with the
fio ioengine libnvtcp_fio.so and the nvtcp discover, identify, perf and bench
tools.")

set(CPACK_DEBIAN_LIBS_PACKAGE_NAME libnvtcp0)
set(CPACK_DEBIAN_LIBS_PACKAGE_SECTION libs)
# dpkg's ldconfig trigger, which Debian's policy wants of a package with a shared library.
set(CPACK_DEBIAN_LIBS_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/libs/triggers)
# shlibs for packages that link libnvtcp, and the ldconfig trigger.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # only libnvtcp0 has a library with a SONAME
set(CPACK_DEBIAN_LIBS_DESCRIPTION "userspace NVMe-over-TCP host library
libnvtcp connects to NVMe/TCP controllers (the Linux kernel's nvmet, SPDK,
nvtcp) and runs admin and I/O commands on per-thread queue pairs, with
reconnect, keep-alive, digests, DH-HMAC-CHAP and TLS.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libnvtcp-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# nvtcpConfig.cmake finds fmt; libnvtcp.a also needs liburing and ISA-L at link time.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libfmt-dev, liburing-dev, libisal-dev, libssl-dev")
set(CPACK_DEBIAN_DEV_DESCRIPTION "userspace NVMe-over-TCP host library (development files)
Headers, the static library, the CMake package (find_package(nvtcp):
nvtcp::nvtcp and nvtcp::nvtcp_static) and nvtcp.pc for pkg-config.")
include(CPack)
