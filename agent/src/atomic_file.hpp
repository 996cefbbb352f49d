#pragma once
// Whole files under the agent's state directory, replaced atomically: a reader
// (or the agent after a crash or a power cut) sees the old contents or the new,
// never a mix. Used by the result store, the spool and the dedup record's rewrite.
#include <filesystem>

#include "fleetlink/expected.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink::agent {

// Write <path>.tmp, fsync it, rename it over path, fsync the directory (the
// rename is durable only once the directory entry is on disk).
Expected<void> write_file_atomic(const std::filesystem::path& path, const Bytes& data);
Expected<Bytes> read_file_bytes(const std::filesystem::path& path);

}  // namespace fleetlink::agent
