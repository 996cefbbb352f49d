// The built-in artifact store against real files in a temporary directory:
// limits, nothing half-stored, replacing, listing, retention, reopening.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "artifacts/artifact_store.hpp"

using namespace fleetlink::broker;
namespace fs = std::filesystem;

namespace {

constexpr const char* kCmd = "01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e";
constexpr const char* kCmd2 = "01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6f";
// sha256("hello") and sha256("")
constexpr const char* kShaHello = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
constexpr const char* kShaEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr std::uint64_t kT0 = 1'733'000'000'000;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/fleetlink-artifacts-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::unique_ptr<ArtifactStore> open_store(const fs::path& root, ArtifactLimits limits = {}) {
  auto r = ArtifactStore::open(root.string(), limits);
  REQUIRE(std::holds_alternative<std::unique_ptr<ArtifactStore>>(r));
  return std::move(std::get<std::unique_ptr<ArtifactStore>>(r));
}

ArtifactInfo info(const char* cmd, const char* name, const char* sha, std::uint64_t at = kT0) {
  return ArtifactInfo{cmd, name, 0, sha, "rig-1", at};
}

// Stores `body` under (cmd, name), declared with `sha`; `computed` is the digest
// the endpoint found (the declared one unless given). Returns the refusal, if any.
std::optional<ArtifactRefusal> put(ArtifactStore& s, const char* cmd, const char* name, const std::string& body,
                                   const char* sha, std::uint64_t at = kT0, const char* computed = nullptr) {
  auto b = s.begin(info(cmd, name, sha, at), body.size());
  if (auto* e = std::get_if<ArtifactError>(&b)) return e->why;
  auto& in = std::get<ArtifactStore::Incoming>(b);
  if (auto e = s.write(in, body)) return e->why;
  auto c = s.commit(in, computed ? computed : sha);
  if (auto* e = std::get_if<ArtifactError>(&c)) return e->why;
  return std::nullopt;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::size_t files_in(const fs::path& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir, ec)) ++n;
  return n;
}

}  // namespace

TEST_CASE("artifacts: a complete upload is listed with its size and digest, and its bytes read back") {
  TempDir tmp;
  auto s = open_store(tmp.path);
  REQUIRE_FALSE(put(*s, kCmd, "output.log", "hello", kShaHello));
  const auto list = s->list(kCmd);
  REQUIRE(list.size() == 1);
  CHECK(list[0].name == "output.log");
  CHECK(list[0].size == 5);
  CHECK(list[0].sha256 == kShaHello);
  CHECK(list[0].rig_id == "rig-1");
  CHECK(slurp(s->path_of(kCmd, "output.log")) == "hello");
  CHECK(s->total_bytes() == 5);
  CHECK(s->uploads_in_progress() == 0);
  CHECK(s->list(kCmd2).empty());
  CHECK(s->path_of(kCmd, "other.log").empty());
}

TEST_CASE("artifacts: names that are paths, hidden or too long are refused before anything is written") {
  TempDir tmp;
  auto s = open_store(tmp.path);
  for (const char* bad : {"../x", "a/b", ".hidden", "", "a b", "x\n"}) {
    CHECK(put(*s, kCmd, bad, "hello", kShaHello) == ArtifactRefusal::bad_name);
  }
  CHECK(put(*s, kCmd, std::string(129, 'a').c_str(), "hello", kShaHello) == ArtifactRefusal::bad_name);
  CHECK(put(*s, "../../etc", "x", "hello", kShaHello) == ArtifactRefusal::bad_name);
  CHECK(files_in(tmp.path / ".incoming") == 0);
}

TEST_CASE("artifacts: a body of the wrong length or digest leaves nothing stored") {
  TempDir tmp;
  auto s = open_store(tmp.path);
  {
    auto b = s->begin(info(kCmd, "a.log", kShaHello), 10);
    auto& in = std::get<ArtifactStore::Incoming>(b);
    REQUIRE_FALSE(s->write(in, "hello"));
    auto c = s->commit(in, kShaHello);
    REQUIRE(std::holds_alternative<ArtifactError>(c));
    CHECK(std::get<ArtifactError>(c).why == ArtifactRefusal::size_mismatch);
  }
  {
    auto b = s->begin(info(kCmd, "a.log", kShaHello), 3);
    auto& in = std::get<ArtifactStore::Incoming>(b);
    auto e = s->write(in, "hello");  // more than declared
    REQUIRE(e);
    CHECK(e->why == ArtifactRefusal::size_mismatch);
  }
  CHECK(put(*s, kCmd, "a.log", "hellO", kShaHello, kT0, kShaEmpty) == ArtifactRefusal::digest_mismatch);
  CHECK(s->list(kCmd).empty());
  CHECK(s->total_bytes() == 0);
  CHECK(s->uploads_in_progress() == 0);
  CHECK(files_in(tmp.path / ".incoming") == 0);
}

TEST_CASE("artifacts: an upload cut off (its Incoming dropped) leaves nothing, and a crash's leftovers go at open") {
  TempDir tmp;
  {
    auto s = open_store(tmp.path);
    {
      auto b = s->begin(info(kCmd, "a.log", kShaHello), 5);
      auto& in = std::get<ArtifactStore::Incoming>(b);
      REQUIRE_FALSE(s->write(in, "he"));
      CHECK(files_in(tmp.path / ".incoming") == 1);
      CHECK(s->uploads_in_progress() == 1);
    }
    CHECK(files_in(tmp.path / ".incoming") == 0);
    CHECK(s->uploads_in_progress() == 0);
    CHECK(s->list(kCmd).empty());
  }
  std::ofstream(tmp.path / ".incoming" / "left-by-a-crash") << "partial";
  auto s = open_store(tmp.path);
  CHECK(files_in(tmp.path / ".incoming") == 0);
}

TEST_CASE("artifacts: the per-artifact, per-command, total and in-progress limits") {
  TempDir tmp;
  ArtifactLimits limits;
  limits.max_artifact_bytes = 8;
  limits.max_command_bytes = 12;
  limits.max_total_bytes = 16;
  limits.max_uploads = 1;
  auto s = open_store(tmp.path, limits);
  CHECK(put(*s, kCmd, "big", "123456789", kShaHello) == ArtifactRefusal::too_large);
  REQUIRE_FALSE(put(*s, kCmd, "a", "hello", kShaHello));
  REQUIRE_FALSE(put(*s, kCmd, "b", "hello", kShaHello));
  CHECK(put(*s, kCmd, "c", "hello", kShaHello) == ArtifactRefusal::too_large);  // 15 > 12 per command
  REQUIRE_FALSE(put(*s, kCmd, "a", "hello", kShaHello));  // replacing a: still 10
  CHECK(s->total_bytes() == 10);
  REQUIRE_FALSE(put(*s, kCmd2, "a", "hello", kShaHello));
  CHECK(put(*s, kCmd2, "b", "hello", kShaHello) == ArtifactRefusal::store_full);  // 20 > 16 in all
  auto first = s->begin(info(kCmd2, "e", kShaEmpty), 0);
  REQUIRE(std::holds_alternative<ArtifactStore::Incoming>(first));
  CHECK(put(*s, kCmd2, "f", "", kShaEmpty) == ArtifactRefusal::busy);
}

TEST_CASE("artifacts: retention removes commands past their age, then the oldest until the total fits") {
  TempDir tmp;
  ArtifactLimits limits;
  limits.max_total_bytes = 12;
  limits.max_age_ms = 1000;
  auto s = open_store(tmp.path, limits);
  REQUIRE_FALSE(put(*s, kCmd, "a", "hello", kShaHello, kT0));
  REQUIRE_FALSE(put(*s, kCmd2, "a", "hello", kShaHello, kT0 + 500));
  CHECK(s->prune(kT0 + 900) == 0);
  CHECK(s->prune(kT0 + 1200) == 3);  // kCmd: its directory, the file and its metadata
  CHECK(s->list(kCmd).empty());
  CHECK(s->list(kCmd2).size() == 1);
  CHECK(s->total_bytes() == 5);
}

TEST_CASE("artifacts: what is stored survives reopening (a restart), with its total") {
  TempDir tmp;
  {
    auto s = open_store(tmp.path);
    REQUIRE_FALSE(put(*s, kCmd, "junit.xml", "hello", kShaHello));
    REQUIRE_FALSE(put(*s, kCmd, "empty", "", kShaEmpty));
  }
  auto s = open_store(tmp.path);
  CHECK(s->total_bytes() == 5);
  const auto list = s->list(kCmd);
  REQUIRE(list.size() == 2);
  CHECK(list[0].name == "empty");
  CHECK(list[1].name == "junit.xml");
  CHECK(s->find(kCmd, "junit.xml")->sha256 == kShaHello);
}

TEST_CASE("artifacts: one kept in the S3 store is a record only, under the command's limits, not the disk's") {
  TempDir d;
  ArtifactLimits limits;
  limits.max_artifact_bytes = 1000;
  limits.max_command_bytes = 1500;
  limits.max_total_bytes = 10;  // the disk's total: S3 objects are not on it
  auto s = open_store(d.path, limits);
  ArtifactInfo remote = info(kCmd, "big.log", kShaHello);
  remote.size = 900;
  remote.s3_key = std::string("lab/") + kCmd + "/big.log";
  CHECK_FALSE(s->check(kCmd, "big.log", 900, /*here=*/false));
  CHECK(s->check(kCmd, "big.log", 900)->why == ArtifactRefusal::store_full);  // it would not fit here
  auto r = s->record_remote(remote);
  REQUIRE(std::holds_alternative<ArtifactInfo>(r));
  CHECK(s->total_bytes() == 0);
  auto found = s->find(kCmd, "big.log");
  REQUIRE(found);
  CHECK(found->s3_key == remote.s3_key);
  CHECK(found->size == 900);
  CHECK(s->path_of(kCmd, "big.log").empty());  // no bytes here to read
  CHECK_FALSE(fs::exists(d.path / kCmd / "big.log"));
  REQUIRE(s->list(kCmd).size() == 1);
  // The command's limit counts it: another 900 would make 1800.
  CHECK(s->check(kCmd, "more.log", 900, false)->why == ArtifactRefusal::too_large);
  ArtifactInfo too_big = remote;
  too_big.name = "huge.log";
  too_big.size = 1001;
  auto no = s->record_remote(too_big);
  REQUIRE(std::holds_alternative<ArtifactError>(no));
  CHECK(std::get<ArtifactError>(no).why == ArtifactRefusal::too_large);
  // A restart reads the record back, still off the disk's total.
  s.reset();
  s = open_store(d.path, limits);
  CHECK(s->total_bytes() == 0);
  REQUIRE(s->find(kCmd, "big.log"));
  CHECK(s->find(kCmd, "big.log")->s3_key == remote.s3_key);
}
