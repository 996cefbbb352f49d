// The agent's artifact uploader without a broker: where it uploads to, the digest
// it declares, and what it reports when nobody answers (the RESULT's detail); and,
// against a plain-HTTP stand-in, the question of where to upload: an older broker's
// plain 404 falls back to the POST, an S3 target is PUT then recorded.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

namespace {

// A plain-HTTP stand-in for the broker's rig port: answers each request by its
// path with what `answer` returns, and keeps the request lines and bodies.
class FakeRigPort {
 public:
  // The request line and this port's own base URL (for answers that point back here).
  using Answer = std::function<std::string(const std::string& request_line, const std::string& base_url)>;
  explicit FakeRigPort(Answer answer) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 8) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeRigPort() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes the accept()
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> requests() {
    std::lock_guard lk(mu_);
    return requests_;
  }
  std::vector<std::string> bodies() {
    std::lock_guard lk(mu_);
    return bodies_;
  }
  std::vector<std::string> heads() {  // lower-cased
    std::lock_guard lk(mu_);
    return heads_;
  }

 private:
  void serve() {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string in;
      char buf[65536];
      std::size_t body_at = std::string::npos;
      std::size_t length = 0;
      while (true) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<std::size_t>(n));
        if (body_at == std::string::npos && (body_at = in.find("\r\n\r\n")) != std::string::npos) {
          body_at += 4;
          std::string head = in.substr(0, body_at);
          for (auto& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
          const auto cl = head.find("content-length:");
          if (cl != std::string::npos) length = std::stoul(head.substr(cl + 15));
        }
        if (body_at != std::string::npos && in.size() >= body_at + length) break;
      }
      const std::string line = in.substr(0, in.find("\r\n"));
      {
        std::lock_guard lk(mu_);
        requests_.push_back(line);
        bodies_.push_back(body_at == std::string::npos ? "" : in.substr(body_at));
        std::string head = in.substr(0, body_at == std::string::npos ? in.size() : body_at);
        for (auto& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        heads_.push_back(std::move(head));
      }
      const std::string out = answer_(line, url());
      (void)!::send(c, out.data(), out.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  Answer answer_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> requests_;
  std::vector<std::string> bodies_;
  std::vector<std::string> heads_;
};

std::string http(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

struct UploadDir {
  std::filesystem::path dir;
  std::filesystem::path file;
  UploadDir() {
    char tmpl[] = "/tmp/fleetlink-upload-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    file = dir / "hello.txt";
    std::ofstream(file) << "hello";
  }
  ~UploadDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

UploadReport upload(const std::string& base, const std::filesystem::path& file) {
  UploadSettings s;
  s.attempts = 1;
  s.connect_timeout_s = 5;
  ArtifactUploader up(s);
  std::promise<UploadReport> done;
  up.submit(base, "01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e", {Attachment{"hello.txt", file.string(), false}},
            [&](UploadReport r) { done.set_value(std::move(r)); });
  return done.get_future().get();
}

constexpr const char* kHelloSha = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

}  // namespace

TEST_CASE("a broker from before the S3 store (plain 404 to the question) gets the POST as before") {
  UploadDir d;
  FakeRigPort old_broker([](const std::string& line, const std::string&) {
    if (line.find(" /v1/artifact-targets/") != std::string::npos) return http(404, "WebSocket endpoint only");
    return http(201, R"({"name":"hello.txt","size":5})");
  });
  const UploadReport r = upload(old_broker.url(), d.file);
  REQUIRE(r.stored.size() == 1);
  CHECK(r.problems.empty());
  const auto req = old_broker.requests();
  REQUIRE(req.size() == 2);
  CHECK(req[0].rfind("POST /v1/artifact-targets/01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e/hello.txt?sha256=", 0) == 0);
  CHECK(req[0].find("&size=5 ") != std::string::npos);
  CHECK(req[1] == std::string("POST /v1/artifacts/01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e/hello.txt?sha256=") +
                      kHelloSha + " HTTP/1.1");
  CHECK(old_broker.bodies()[1] == "hello");
}

TEST_CASE("a JSON refusal of the question is final: no upload follows") {
  UploadDir d;
  FakeRigPort broker([](const std::string&, const std::string&) {
    return http(404, R"({"error":"unknown_command","detail":"no command"})");
  });
  const UploadReport r = upload(broker.url(), d.file);
  CHECK(r.stored.empty());
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].find("the broker answered HTTP 404: {\"error\":\"unknown_command\"") != std::string::npos);
  CHECK(broker.requests().size() == 1);
}

TEST_CASE("an S3 target: PUT with the signed headers, then the broker is told") {
  UploadDir d;
  FakeRigPort both([](const std::string& line, const std::string& base) {
    if (line.find("uploaded=1") != std::string::npos) return http(201, R"({"store":"s3"})");
    if (line.find(" /v1/artifact-targets/") != std::string::npos) {
      return http(200, std::string(R"({"store":"s3","method":"PUT","url":")") + base +
                           R"(/bucket/p/k?X-Amz-Signature=ab","headers":{"content-length":"5",)" +
                           R"("x-amz-meta-fleetlink-sha256":")" + kHelloSha + R"("}})");
    }
    if (line.rfind("PUT /bucket/p/k?X-Amz-Signature=ab ", 0) == 0) return http(200, "");
    return http(400, "unexpected");
  });
  const UploadReport r = upload(both.url(), d.file);
  CHECK(r.problems.empty());
  REQUIRE(r.stored.size() == 1);
  CHECK(r.stored[0].sha256 == kHelloSha);
  const auto req = both.requests();
  REQUIRE(req.size() == 3);
  CHECK(req[1] == "PUT /bucket/p/k?X-Amz-Signature=ab HTTP/1.1");
  CHECK(both.bodies()[1] == "hello");
  // The signed headers, as given; the rig's certificate is not for the store (plain http here anyway).
  CHECK(both.heads()[1].find(std::string("\r\nx-amz-meta-fleetlink-sha256: ") + kHelloSha + "\r\n") !=
        std::string::npos);
  CHECK(both.heads()[1].find("\r\ncontent-length: 5\r\n") != std::string::npos);
  CHECK(req[2].find("&size=5&uploaded=1 HTTP/1.1") != std::string::npos);
}
