# Every dependency is a Debian package found here; nothing is vendored or downloaded.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(OpenSSL 3 REQUIRED)
find_package(libwebsockets 4.1 CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3.10 CONFIG REQUIRED)
pkg_check_modules(UUID REQUIRED IMPORTED_TARGET uuid)
pkg_check_modules(LIBUV REQUIRED IMPORTED_TARGET libuv)

# msgpack-cxx's own CMake package drags in Boost; the header-only core does not need it.
find_path(MSGPACK_CXX_INCLUDE_DIR msgpack.hpp REQUIRED)
add_library(fleetlink_msgpack INTERFACE)
target_include_directories(fleetlink_msgpack SYSTEM INTERFACE ${MSGPACK_CXX_INCLUDE_DIR})
target_compile_definitions(fleetlink_msgpack INTERFACE MSGPACK_NO_BOOST MSGPACK_DEFAULT_API_VERSION=3)

# The top-level CMakeLists declares its options before it includes this file.
if(FLEETLINK_BUILD_TESTS)
  find_package(doctest CONFIG REQUIRED)
endif()
find_package(CURL REQUIRED)  # the agent uploads artifacts, fleetctl talks to the control API, the broker HEADs S3 objects
