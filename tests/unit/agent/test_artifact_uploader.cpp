// The agent's artifact uploader without a broker: where it uploads to, the digest
// it declares, and what it reports when nobody answers (the RESULT's detail).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "artifact_uploader.hpp"

using namespace fleetlink::agent;

TEST_CASE("artifact uploads go to the connected broker's port, over TLS for wss") {
  CHECK(artifact_base_url("wss://broker.lab:8443/agent") == "https://broker.lab:8443");
  CHECK(artifact_base_url("ws://127.0.0.1:9000/agent") == "http://127.0.0.1:9000");
  CHECK(artifact_base_url("wss://[::1]:8443") == "https://[::1]:8443");
  CHECK(artifact_base_url("https://x/agent").empty());
  CHECK(artifact_base_url("").empty());
}

TEST_CASE("the declared digest and size are the file's") {
  char tmpl[] = "/tmp/fleetlink-upload-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::filesystem::path dir = tmpl;
  const auto file = dir / "hello.txt";
  std::ofstream(file) << "hello";
  std::string hex, error;
  std::uint64_t size = 0;
  REQUIRE(sha256_of_file(file.string(), hex, size, error));
  CHECK(hex == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
  CHECK(size == 5);
  CHECK_FALSE(sha256_of_file((dir / "absent").string(), hex, size, error));
  CHECK(error.find("cannot read") != std::string::npos);

  // Nobody listens: each artifact is reported not stored, with why, and an owned file is removed.
  UploadSettings s;
  s.attempts = 2;
  s.retry_delay_ms = 10;
  s.connect_timeout_s = 2;
  ArtifactUploader up(s);
  std::promise<UploadReport> done;
  up.submit("http://127.0.0.1:1", "01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e",
            {Attachment{"hello.txt", file.string(), true}, Attachment{"gone.txt", (dir / "absent").string(), false}},
            [&](UploadReport r) { done.set_value(std::move(r)); });
  const UploadReport r = done.get_future().get();
  CHECK(r.stored.empty());
  REQUIRE(r.problems.size() == 2);
  CHECK(r.problems[0].find("artifact hello.txt not stored: upload failed") == 0);
  CHECK(r.problems[1].find("artifact gone.txt not stored: cannot read") == 0);
  CHECK_FALSE(std::filesystem::exists(file));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
