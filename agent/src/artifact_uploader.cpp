#include "artifact_uploader.hpp"

#include <curl/curl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

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

// One HTTP exchange. body: the file to send (POST or PUT), else none.
ArtifactUploader::Answer ArtifactUploader::exchange(const std::string& url, const char* method, const Attachment* body,
                                                     std::uint64_t size, const std::vector<std::string>& headers,
                                                     bool to_broker) const {
  Answer out;
  File f;
  if (body != nullptr) {
    f.reset(std::fopen(body->path.c_str(), "rb"));
    if (!f) {
      out.unreadable = true;
      return out;
    }
  }
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) {
    out.rc = CURLE_FAILED_INIT;
    return out;
  }
  curl_slist* list = curl_slist_append(nullptr, "Expect:");  // no 100-continue round trip
  for (const std::string& h : headers) list = curl_slist_append(list, h.c_str());
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  if (std::string_view(method) == "PUT") {
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READDATA, f.get());
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(size));
  } else {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    if (body != nullptr) {
      curl_easy_setopt(c, CURLOPT_READDATA, f.get());
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(size));
    } else {
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(0));
    }
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &out.body);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, static_cast<long>(settings_.connect_timeout_s));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(settings_.stall_timeout_s));
  if (to_broker) {
    // The rig's certificate goes to its broker only, never to the S3 store.
    if (!settings_.cert.empty()) curl_easy_setopt(c, CURLOPT_SSLCERT, settings_.cert.c_str());
    if (!settings_.key.empty()) curl_easy_setopt(c, CURLOPT_SSLKEY, settings_.key.c_str());
    if (!settings_.ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, settings_.ca.c_str());
  }
  out.rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out.status);
  curl_slist_free_all(list);
  return out;
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
  unsigned delay = settings_.retry_delay_ms;
  for (unsigned attempt = 1; attempt <= settings_.attempts; ++attempt) {
    const Outcome o = attempt_once(job, a, ref, problem);
    if (o == Outcome::stored) return true;
    if (o == Outcome::final) return false;
    if (attempt < settings_.attempts) {
      FL_INFO("artifact %s of %s: attempt %u failed (%s), again in %u ms", a.name.c_str(), job.cmd_id.c_str(),
              attempt, problem.c_str(), delay);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      delay *= 2;
    }
  }
  return false;
}

// Judges an answer: 2xx as wanted, a transport error or a 5xx worth another
// attempt, any other status final (sending it again changes nothing).
ArtifactUploader::Outcome ArtifactUploader::judge(const Answer& r, long wanted, const std::string& who,
                                                  std::string& problem) {
  if (r.unreadable) {
    problem = "cannot read the file";
    return Outcome::final;
  }
  if (r.rc != CURLE_OK) {
    problem = std::string("upload failed: ") + curl_easy_strerror(r.rc) + (who == "the broker" ? "" : " (" + who + ")");
    return Outcome::retry;
  }
  if (r.status == wanted) return Outcome::stored;
  problem = who + " answered HTTP " + std::to_string(r.status) + (r.body.empty() ? "" : ": " + r.body);
  return r.status >= 500 || r.status < 200 ? Outcome::retry : Outcome::final;
}

ArtifactUploader::Outcome ArtifactUploader::attempt_once(const Job& job, const Attachment& a,
                                                         const msg::ArtifactRef& ref, std::string& problem) const {
  const std::string where = job.cmd_id + "/" + a.name + "?sha256=" + ref.sha256;
  const std::string sized = where + "&size=" + std::to_string(ref.size);
  // Where to? A broker of before the S3 store knows no such path and answers a
  // plain 404 (no JSON error): then the bytes go to it as always.
  const Answer ask = exchange(job.base_url + "/v1/artifact-targets/" + sized, "POST", nullptr, 0, {}, true);
  nlohmann::json target;
  if (ask.rc == CURLE_OK && ask.status == 200) {
    target = nlohmann::json::parse(ask.body, nullptr, /*allow_exceptions=*/false);
    if (!target.is_object()) {
      problem = "the broker's answer to where to upload is not JSON: " + ask.body;
      return Outcome::final;
    }
  } else if (ask.rc == CURLE_OK && ask.status == 404) {
    const nlohmann::json refusal = nlohmann::json::parse(ask.body, nullptr, false);
    if (refusal.is_object() && refusal.contains("error")) return judge(ask, 200, "the broker", problem);
    target = {{"store", "broker"}};  // an older broker
  } else {
    return judge(ask, 200, "the broker", problem);
  }

  const std::string store = target.value("store", "");
  if (store == "broker") {
    const Answer r = exchange(job.base_url + "/v1/artifacts/" + where, "POST", &a, ref.size,
                              {"Content-Type: application/octet-stream"}, true);
    const Outcome o = judge(r, 201, "the broker", problem);
    if (o == Outcome::stored) {
      FL_INFO("artifact %s of %s stored (%llu bytes)", a.name.c_str(), job.cmd_id.c_str(),
              static_cast<unsigned long long>(ref.size));
    }
    return o;
  }
  if (store != "s3" || !target.contains("url") || !target["url"].is_string()) {
    problem = "the broker named no place to upload to: " + ask.body;
    return Outcome::final;
  }
  // The headers are signed into the URL: each must be sent as given. curl
  // writes Content-Length itself, from the file's size (which must be the one signed).
  std::vector<std::string> headers = {"Content-Type:"};
  if (target.contains("headers") && target["headers"].is_object()) {
    for (const auto& [name, value] : target["headers"].items()) {
      if (!value.is_string()) continue;
      if (name == "content-length") {
        if (value.get<std::string>() != std::to_string(ref.size)) {
          problem = "the broker signed " + value.get<std::string>() + " bytes, the file has " + std::to_string(ref.size);
          return Outcome::final;
        }
        continue;
      }
      headers.push_back(name + ": " + value.get<std::string>());
    }
  }
  const Answer put = exchange(target["url"].get<std::string>(), "PUT", &a, ref.size, headers, false);
  if (const Outcome o = judge(put, 200, "the S3 store", problem); o != Outcome::stored) return o;
  // In the store: the broker looks at the object and lists it.
  const Answer done = exchange(job.base_url + "/v1/artifact-targets/" + sized + "&uploaded=1", "POST", nullptr, 0, {}, true);
  const Outcome o = judge(done, 201, "the broker", problem);
  if (o == Outcome::stored) {
    FL_INFO("artifact %s of %s stored in the S3 store (%llu bytes)", a.name.c_str(), job.cmd_id.c_str(),
            static_cast<unsigned long long>(ref.size));
  }
  return o;
}

}  // namespace fleetlink::agent
