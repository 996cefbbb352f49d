#include "artifact_uploader.hpp"

#include <curl/curl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "common/log.hpp"
#include "common/sha256.hpp"
#include "fleetlink/artifacts.hpp"

namespace fleetlink::agent {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const noexcept {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

std::size_t collect_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* out = static_cast<std::string*>(user);
  if (out->size() < 4096) out->append(data, std::min<std::size_t>(size * n, 4096 - out->size()));
  return size * n;
}

// curl_global_init is not thread-safe: done once, before any thread uses curl.
void curl_once() {
  static const bool done = [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return true;
  }();
  (void)done;
}

}  // namespace

std::string artifact_base_url(const std::string& url) {
  std::string scheme;
  std::string rest;
  if (url.rfind("wss://", 0) == 0) {
    scheme = "https://";
    rest = url.substr(6);
  } else if (url.rfind("ws://", 0) == 0) {
    scheme = "http://";
    rest = url.substr(5);
  } else {
    return {};
  }
  const auto slash = rest.find('/');
  return scheme + (slash == std::string::npos ? rest : rest.substr(0, slash));
}

bool sha256_of_file(const std::string& path, std::string& hex, std::uint64_t& size, std::string& error) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    error = "cannot read " + path;
    return false;
  }
  Sha256 sha;
  if (!sha.ok()) {
    error = "cannot start a sha256";
    return false;
  }
  std::vector<unsigned char> buf(1 << 16);
  size = 0;
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) {
    sha.update(std::string_view(reinterpret_cast<const char*>(buf.data()), n));
    size += n;
  }
  if (std::ferror(f.get())) {
    error = "error reading " + path;
    return false;
  }
  hex = sha.hex();
  return !hex.empty();
}

ArtifactUploader::ArtifactUploader(UploadSettings settings) : settings_(std::move(settings)) {
  curl_once();
  thread_ = std::thread([this] { run(); });
}

ArtifactUploader::~ArtifactUploader() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ArtifactUploader::submit(std::string base_url, std::string cmd_id, std::vector<Attachment> files, Done done) {
  {
    std::lock_guard lk(mu_);
    queue_.push_back(Job{std::move(base_url), std::move(cmd_id), std::move(files), std::move(done)});
  }
  cv_.notify_one();
}

void ArtifactUploader::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    UploadReport report = upload_all(job);
    for (const Attachment& a : job.files) {
      if (a.owned) ::unlink(a.path.c_str());
    }
    job.done(std::move(report));
  }
}

UploadReport ArtifactUploader::upload_all(const Job& job) {
  UploadReport report;
  for (const Attachment& a : job.files) {
    msg::ArtifactRef ref;
    std::string problem;
    if (upload_one(job, a, ref, problem)) {
      report.stored.push_back(std::move(ref));
    } else {
      FL_WARN("artifact %s of %s not uploaded: %s", a.name.c_str(), job.cmd_id.c_str(), problem.c_str());
      report.problems.push_back("artifact " + a.name + " not stored: " + problem);
    }
  }
  return report;
}

bool ArtifactUploader::upload_one(const Job& job, const Attachment& a, msg::ArtifactRef& ref, std::string& problem) {
  if (job.base_url.empty()) {
    problem = "no broker connection to upload to";
    return false;
  }
  std::string error;
  if (!sha256_of_file(a.path, ref.sha256, ref.size, error)) {
    problem = error;
    return false;
  }
  ref.name = a.name;
  const std::string url = job.base_url + "/v1/artifacts/" + job.cmd_id + "/" + a.name + "?sha256=" + ref.sha256;
  unsigned delay = settings_.retry_delay_ms;
  for (unsigned attempt = 1; attempt <= settings_.attempts; ++attempt) {
    File f(std::fopen(a.path.c_str(), "rb"));
    if (!f) {
      problem = "cannot read " + a.path;
      return false;
    }
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
    if (!curl) {
      problem = "curl_easy_init failed";
      return false;
    }
    std::string answer;
    curl_slist* headers = curl_slist_append(nullptr, "Expect:");  // no 100-continue round trip
    headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
    CURL* c = curl.get();
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_READDATA, f.get());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(ref.size));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, static_cast<long>(settings_.connect_timeout_s));
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(settings_.stall_timeout_s));
    if (!settings_.cert.empty()) curl_easy_setopt(c, CURLOPT_SSLCERT, settings_.cert.c_str());
    if (!settings_.key.empty()) curl_easy_setopt(c, CURLOPT_SSLKEY, settings_.key.c_str());
    if (!settings_.ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, settings_.ca.c_str());
    const CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    if (rc == CURLE_OK && status == 201) {
      FL_INFO("artifact %s of %s stored (%llu bytes)", a.name.c_str(), job.cmd_id.c_str(),
              static_cast<unsigned long long>(ref.size));
      return true;
    }
    if (rc != CURLE_OK) {
      problem = std::string("upload failed: ") + curl_easy_strerror(rc);
    } else {
      problem = "the broker answered HTTP " + std::to_string(status) + (answer.empty() ? "" : ": " + answer);
      if (status >= 400 && status < 500) return false;  // final: sending it again changes nothing
    }
    if (attempt < settings_.attempts) {
      FL_INFO("artifact %s of %s: attempt %u failed (%s), again in %u ms", a.name.c_str(), job.cmd_id.c_str(),
              attempt, problem.c_str(), delay);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      delay *= 2;
    }
  }
  return false;
}

}  // namespace fleetlink::agent
