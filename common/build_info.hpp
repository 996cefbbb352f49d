#pragma once
// What a program was built from: the project version (CMake's project(VERSION), the
// same FLEETLINK_VERSION the SDK and the agent report) and, when the source tree was
// a git checkout at build time, its commit.
#include <string>
#include <string_view>

namespace fleetlink::build_info {

std::string_view version() noexcept;
// The short commit id ("1b0dc4c5a2f3", "-dirty" appended with uncommitted changes);
// "" when unknown (built from a tarball without FLEETLINK_BUILD_COMMIT).
std::string_view commit() noexcept;
// "fleetlink-broker 0.1.0 (commit 1b0dc4c5a2f3, protocol 1)" with `more` = "protocol 1";
// "fleetctl 0.1.0" without a commit and without more.
std::string version_line(std::string_view program, std::string_view more = {});

}  // namespace fleetlink::build_info
