# SPDX-License-Identifier: Apache-2.0
# The Debian package for hosts without containers: what it installs, and
# CPack's DEB generator (packaging/build-deb runs it; docs/deploy.md, "Hosts
# without containers: the .deb"). The paths are the package's: the unit
# names /usr/bin/rdmagw and /etc/rdmagw/rdmagw.yaml, so configure with
# CMAKE_INSTALL_PREFIX=/usr (build-deb does) for `cmake --install` to match.

install(TARGETS rdmagw rdmagwctl RUNTIME DESTINATION bin)
# sbin: it changes iptables, an administrator's command (root's PATH has it).
install(PROGRAMS tools/rdmagw-iptables DESTINATION sbin)
# Absolute: Debian 12 keeps system units and configuration there whatever
# the prefix.
install(FILES packaging/rdmagw.service DESTINATION /lib/systemd/system)
install(FILES packaging/rdmagw.yaml DESTINATION /etc/rdmagw)
# Not under share/doc, which minimal systems drop (dpkg path-exclude): a
# drop-in to copy (docs/deploy.md), not documentation.
install(FILES packaging/takeover-reload.conf DESTINATION share/rdmagw)
install(FILES README.md packaging/copyright DESTINATION share/doc/rdmagw)
# README.md's links point into docs/: the same layout.
file(GLOB RDMAGW_DOCS CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/docs/*.md")
install(FILES ${RDMAGW_DOCS} DESTINATION share/doc/rdmagw/docs)

# Manual pages rdmagw(8), rdmagwctl(8), rdmagw.yaml(5), made from docs/ by
# packaging/make-man with go-md2man (a build without it has none; build-deb
# requires it).
find_program(GO_MD2MAN go-md2man)
if(GO_MD2MAN)
  set(RDMAGW_MAN_DIR ${CMAKE_BINARY_DIR}/man)
  set(RDMAGW_MAN8 ${RDMAGW_MAN_DIR}/rdmagw.8.gz ${RDMAGW_MAN_DIR}/rdmagwctl.8.gz)
  set(RDMAGW_MAN5 ${RDMAGW_MAN_DIR}/rdmagw.yaml.5.gz)
  add_custom_command(
    OUTPUT ${RDMAGW_MAN8} ${RDMAGW_MAN5}
    COMMAND ${PROJECT_SOURCE_DIR}/packaging/make-man ${RDMAGW_MAN_DIR}
    DEPENDS ${PROJECT_SOURCE_DIR}/packaging/make-man ${PROJECT_SOURCE_DIR}/docs/man/rdmagw.8.md
            ${PROJECT_SOURCE_DIR}/docs/man/rdmagwctl.8.md ${PROJECT_SOURCE_DIR}/docs/man/rdmagw.yaml.5.md
            ${PROJECT_SOURCE_DIR}/docs/configuration.md
    COMMENT "Manual pages from docs/ (packaging/make-man)")
  add_custom_target(man_pages ALL DEPENDS ${RDMAGW_MAN8} ${RDMAGW_MAN5})
  install(FILES ${RDMAGW_MAN8} DESTINATION share/man/man8)
  install(FILES ${RDMAGW_MAN5} DESTINATION share/man/man5)
else()
  message(STATUS "go-md2man not found: no manual pages (tools/dev/install-deps installs it)")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rdmagw)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "per-host proxy carrying TCP streams to peer hosts over RDMA or TCP")
# Debian's long description: lines of at most 80 columns (CPack indents them).
string(JOIN "\n" CPACK_PACKAGE_DESCRIPTION
  "An application connects to its local rdmagw (TCP or a Unix socket); rdmagw"
  "carries the connection as one stream of a shared session to the peer host's"
  "rdmagw (RDMA RC queue pairs, built for Alibaba Cloud's eRDMA, or TCP), which"
  "connects to the real server. Neither application changes."
  "."
  "Includes rdmagwctl (the admin endpoint's client), rdmagw-iptables (the"
  "transparent redirect's rules) and a hardened systemd unit (Type=notify).")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "rdmagw maintainers <maintainers@users.noreply.a-seed-4137bd7d.example>")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # rdmagw_0.1.0-1_amd64.deb
# The libraries rdmagw and rdmagwctl link, found by dpkg-shlibdeps; the rest
# by hand: rdmagw-iptables runs on python3 and drives iptables, the
# maintainer scripts create the user with adduser, and the unit's
# ExecReload= runs /bin/kill, which is procps's on Debian 12 (a minimal
# system has none: tests/docker/e2e/test_deb.py found it so).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3, iptables, adduser, procps")
# The verbs drivers libibverbs loads at run time (erdma among them): without
# them `transport: auto` runs on TCP.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "ibverbs-providers")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/conffiles;${PROJECT_SOURCE_DIR}/packaging/postinst;${PROJECT_SOURCE_DIR}/packaging/prerm;${PROJECT_SOURCE_DIR}/packaging/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
