# SPDX-License-Identifier: Apache-2.0
# Install-time part of cmake/install.cmake: the systemd unit and the target's configuration,
# placed by the prefix given now (cmake --install --prefix, or the package's /usr).
# A prefix of /usr keeps configuration in /etc, as the FHS and GNUInstallDirs have it.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(nvtcp_etc "/etc/nvtcp")
else()
  set(nvtcp_etc "${CMAKE_INSTALL_PREFIX}/etc/nvtcp")
endif()
set(NVTCP_EXEC "${CMAKE_INSTALL_PREFIX}/${NVTCP_BINDIR}/nvtcp")
set(NVTCP_CONFIG "${nvtcp_etc}/target.json")
# A directory of its own per install: an install to another prefix (cpack's, say) may run at the
# same time from the same build tree, and its unit names other paths.
string(RANDOM LENGTH 16 unit_tag)
set(unit_dir "${NVTCP_BINARY_DIR}/nvtcp-service-${unit_tag}")
configure_file("${NVTCP_SOURCE_DIR}/packaging/nvtcp-target.service.in" "${unit_dir}/nvtcp-target.service" @ONLY)
file(INSTALL "${unit_dir}/nvtcp-target.service" DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
file(REMOVE_RECURSE "${unit_dir}")
file(INSTALL "${NVTCP_SOURCE_DIR}/packaging/target.json" DESTINATION "${nvtcp_etc}")
file(INSTALL "${NVTCP_SOURCE_DIR}/packaging/target.json" DESTINATION "${CMAKE_INSTALL_PREFIX}/share/doc/nvtcp/examples")
