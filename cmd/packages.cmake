# Debian packages, by CPack (cpack -G DEB in the build folder; tests/packages checks them):
#   libratewin<major>  the shared C library (component lib);
#   libratewin-dev     headers, the static C++ library, the CMake package and pkg-config
#                      files (component dev), on the library of the same version;
#   ratewin-server     the server, its systemd unit, rules and environment file (conffiles)
#                      and the operators' files (component server).
# Packages install under /usr (configuration under /etc), whatever prefix the build has.
# Their other dependencies are what dpkg-shlibdeps finds the binaries linked to, and for
# the development package the libraries the C++ library is linked with.
#
# The server links the C++ library statically, as every program built on ratewin::cxx
# does (the shared library exports the C ABI only), so ratewin-server needs no libratewin
# package: one binary, no version to keep in step with another package.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ratewin)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR ratewin)
set(CPACK_PACKAGE_CONTACT "ratewin maintainers <maintainers@ratewin.invalid>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)
# Staged with DESTDIR, so the install runs with the package's own prefix, /usr, and
# server/deploy/install.cmake puts the configuration in /etc and the unit's paths right.
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL lib dev)
if(RATEWIN_BUILD_SERVER)
  list(APPEND CPACK_COMPONENTS_ALL server)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)

# Each package's description: the project's summary (its synopsis, which CPack puts
# first), then what the package holds.
set(ratewin_lib_package libratewin${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_LIB_PACKAGE_NAME ${ratewin_lib_package})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_LIB_DESCRIPTION "The C library (the C ABI of ratewin.h).
One honest rate limit across many replicas: decisions in process, counts shared
through Redis, refusals decided without a network round trip.")
# A shlibs file for the package with the shared library, so that programs packaged
# against it depend on it (CPack adds the ldconfig calls).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libratewin-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_DESCRIPTION "Development files.
Headers for C (ratewin.h) and C++ (ratewin/ratewin.h), the static C++ library, and
find_package(ratewin) and pkg-config (ratewin, ratewin-cxx) files.")
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "${ratewin_lib_package} (= ${PROJECT_VERSION}), libhiredis-dev, libuv1-dev, libxxhash-dev, libssl-dev, pkg-config")

set(CPACK_DEBIAN_SERVER_PACKAGE_NAME ratewin-server)
set(CPACK_DEBIAN_SERVER_PACKAGE_SECTION net)
set(CPACK_DEBIAN_SERVER_DESCRIPTION "The HTTP and gRPC server.
Rate limits for API gateways and services as a server: forward-auth for nginx and
others, Envoy's rate limit service (gRPC), rules reloaded without restart, counts
shared through Redis. A systemd unit (ratewin-server.service), not started on install.")
set(CPACK_DEBIAN_SERVER_PACKAGE_SUGGESTS "redis-server")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_EXTRA
    ${CMAKE_CURRENT_LIST_DIR}/server/deploy/debian/conffiles
    ${CMAKE_CURRENT_LIST_DIR}/server/deploy/debian/postinst
    ${CMAKE_CURRENT_LIST_DIR}/server/deploy/debian/postrm)
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
