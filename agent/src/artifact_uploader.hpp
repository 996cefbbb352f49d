#pragma once
// Uploads a finished command's artifacts to the broker it is connected to,
// beside the command channel: `POST https://<broker>/v1/artifacts/<cmd_id>/<name>?sha256=<hex>`
// over its own connection with the rig's client certificate (docs/PROTOCOL.md
// section 10). One thread of its own, so a 100 MB log never holds the agent's loop
// or the rig's other commands. The RESULT is sent only once every upload of its
// command has been answered: it names only what the broker stored.
//
// Each artifact first asks the broker where it goes (`POST /v1/artifact-targets/`):
// to the broker itself, or, when the broker has an S3-compatible store, to a
// presigned URL it PUTs the file to, then tells the broker it is there. A
// broker that does not know the question (plain 404) gets the POST as always.
//
// A transport error or a 5xx answer is retried (the upload starts again from
// its first byte: the broker keeps nothing of a cut-off body); a 4xx answer is
// final and said in the RESULT's detail.
#include <curl/curl.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fleetlink/messages.hpp"

namespace fleetlink::agent {

struct Attachment {
  std::string name;   // as operators see it
  std::string path;   // the file on the rig
  bool owned = false; // the agent made it (a suite's output log): removed once uploaded or given up
};

struct UploadSettings {
  std::string cert;
  std::string key;
  std::string ca;
  unsigned attempts = 3;              // per artifact
  unsigned retry_delay_ms = 1000;     // doubled after each failed attempt
  unsigned connect_timeout_s = 10;
  unsigned stall_timeout_s = 60;      // below 1 KiB/s for this long: the attempt fails
};

struct UploadReport {
  std::vector<msg::ArtifactRef> stored;  // answered 201, in the order attached
  std::vector<std::string> problems;     // one line per artifact not stored, for the RESULT's detail
};

// "wss://h:p/agent" -> "https://h:p", "ws://h:p/agent" -> "http://h:p"; "" if not a broker URL.
std::string artifact_base_url(const std::string& broker_url);

// The lower-case hex sha256 of a file's bytes and their number; false if unreadable.
bool sha256_of_file(const std::string& path, std::string& hex, std::uint64_t& size, std::string& error);

class ArtifactUploader {
 public:
  using Done = std::function<void(UploadReport)>;

  explicit ArtifactUploader(UploadSettings settings);
  ~ArtifactUploader();  // finishes the upload in progress, gives up the rest (their done() is not called)
  ArtifactUploader(const ArtifactUploader&) = delete;
  ArtifactUploader& operator=(const ArtifactUploader&) = delete;

  // Thread-safe. Uploads every attachment of cmd_id to base_url, then calls done on the uploader's thread.
  void submit(std::string base_url, std::string cmd_id, std::vector<Attachment> files, Done done);

 private:
  struct Job {
    std::string base_url;
    std::string cmd_id;
    std::vector<Attachment> files;
    Done done;
  };
  enum class Outcome : std::uint8_t { stored, retry, final };
  struct Answer {
    CURLcode rc = CURLE_OK;
    long status = 0;
    std::string body;  // its first 4 KiB
    bool unreadable = false;
  };
  void run();
  UploadReport upload_all(const Job& job);
  bool upload_one(const Job& job, const Attachment& a, msg::ArtifactRef& ref, std::string& problem);
  Outcome attempt_once(const Job& job, const Attachment& a, const msg::ArtifactRef& ref, std::string& problem) const;
  Answer exchange(const std::string& url, const char* method, const Attachment* body, std::uint64_t size,
                  const std::vector<std::string>& headers, bool to_broker) const;
  static Outcome judge(const Answer& r, long wanted, const std::string& who, std::string& problem);

  UploadSettings settings_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fleetlink::agent
