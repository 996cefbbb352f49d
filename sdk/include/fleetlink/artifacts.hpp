#pragma once
// Artifacts: files a command leaves behind, uploaded beside the command channel
// (docs/PROTOCOL.md §9). What a name may be and how many one RESULT may name are
// shared by the agent, the broker and the codec, so none of them can drift.
#include <cstddef>
#include <string_view>

#include "fleetlink/export.hpp"

namespace fleetlink {

inline constexpr std::size_t kMaxArtifactNameBytes = 128;
inline constexpr std::size_t kMaxArtifactsPerResult = 64;
inline constexpr std::size_t kSha256HexBytes = 64;

// [A-Za-z0-9._-]{1,128}, not starting with '.': a plain file name on every
// filesystem, never a path, never hidden, never "." or "..".
FLEETLINK_API bool valid_artifact_name(std::string_view name) noexcept;
// 64 lower-case hex digits.
FLEETLINK_API bool valid_sha256_hex(std::string_view hex) noexcept;

}  // namespace fleetlink
