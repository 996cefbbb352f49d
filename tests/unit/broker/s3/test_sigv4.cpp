// SigV4 presigned URLs against fixed, published answers: a lenient S3 server
// (s3rver checks no V4 signature) would take a wrong one, so these are what
// keep the signing honest.
#include <doctest/doctest.h>

#include <string>

#include "s3/s3_target.hpp"
#include "s3/sigv4.hpp"

using namespace fleetlink::broker::s3;

namespace {

const Credentials kAwsExample{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};

// AWS's example in "Authenticating Requests: Using Query Parameters (AWS
// Signature Version 4)", S3 API reference: GET test.txt from examplebucket,
// 24 May 2013 00:00:00 UTC, valid 86400 s.
PresignRequest aws_example() {
  PresignRequest r;
  r.method = "GET";
  r.scheme = "https";
  r.host = "examplebucket.s3.amazonaws.com";
  r.path = "/test.txt";
  r.region = "us-east-1";
  r.time_s = 1369353600;
  r.expires_s = 86400;
  return r;
}

}  // namespace

TEST_CASE("AWS's published presigned-URL example: canonical request, string to sign, signature") {
  const PresignRequest r = aws_example();
  CHECK(canonical_request(r, kAwsExample) ==
        "GET\n/test.txt\n"
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_"
        "request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\n"
        "host:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD");
  CHECK(string_to_sign(r, kAwsExample) ==
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04");
  CHECK(signature(r, kAwsExample) == "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
  CHECK(presign_url(r, kAwsExample) ==
        "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
        "AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires="
        "86400&X-Amz-SignedHeaders=host&X-Amz-Signature="
        "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
}

TEST_CASE("a path-style PUT with signed headers and a port matches botocore's S3SigV4QueryAuth") {
  // Computed once with botocore 1.43 (S3SigV4QueryAuth, region eu-west-3,
  // expires 900, 2026-12-04T20:10:25Z) for the same request.
  TargetSettings s;
  s.endpoint = "http://127.0.0.1:9000";
  s.bucket = "fleet-artifacts";
  s.region = "eu-west-3";
  s.prefix = "fleetlink/";
  s.credentials = kAwsExample;
  s.url_ttl_s = 900;
  std::string error;
  auto t = Target::make(s, error);
  REQUIRE_MESSAGE(t, error);
  const std::string key = t->object_key("01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e", "suite.log");
  CHECK(key == "fleetlink/01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e/suite.log");
  const std::string url = t->presign(
      "PUT", key, 1796415025,
      {{"content-length", "1234"},
       {"x-amz-meta-fleetlink-sha256", "abababababababababababababababababababababababababababababababab"}});
  CHECK(url ==
        "http://127.0.0.1:9000/fleet-artifacts/fleetlink/01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e/suite.log?"
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261204%2Feu-west-3%2Fs3%2Faws4_"
        "request&X-Amz-Date=20261204T201025Z&X-Amz-Expires=900&X-Amz-SignedHeaders=content-length%3Bhost%3Bx-amz-"
        "meta-fleetlink-sha256&X-Amz-Signature=2df118beb6d8cc477902e5ab4233fa1cf20f3e004b240895cbf97e11d964cf0f");
  CHECK(t->describe() == "http://127.0.0.1:9000/fleet-artifacts");
}

TEST_CASE("virtual-hosted style puts the bucket in the host") {
  TargetSettings s;
  s.endpoint = "https://s3.example.net/";
  s.bucket = "labs";
  s.prefix = "";
  s.path_style = false;
  s.credentials = kAwsExample;
  std::string error;
  auto t = Target::make(s, error);
  REQUIRE_MESSAGE(t, error);
  const std::string url = t->presign("GET", t->object_key("c", "n"), 1369353600);
  CHECK(url.rfind("https://labs.s3.example.net/c/n?X-Amz-Algorithm=AWS4-HMAC-SHA256&", 0) == 0);
}

TEST_CASE("settings that cannot make a URL are refused with a reason") {
  TargetSettings s;
  s.bucket = "labs";
  s.credentials = kAwsExample;
  std::string error;
  s.endpoint = "ftp://x";
  CHECK_FALSE(Target::make(s, error));
  CHECK(error.find("http://") != std::string::npos);
  s.endpoint = "http://x/path";
  CHECK_FALSE(Target::make(s, error));
  s.endpoint = "http://x:9000";
  s.bucket = "No_Such";
  CHECK_FALSE(Target::make(s, error));
  CHECK(error.find("bucket") != std::string::npos);
  s.bucket = "labs";
  s.credentials.secret_key.clear();
  CHECK_FALSE(Target::make(s, error));
  s.credentials = kAwsExample;
  s.url_ttl_s = 604801;
  CHECK_FALSE(Target::make(s, error));
  s.url_ttl_s = 60;
  CHECK(Target::make(s, error));
}

TEST_CASE("uri_encode keeps only unreserved characters (and '/' in paths)") {
  CHECK(uri_encode("a b/c~d_e.f-g", true) == "a%20b/c~d_e.f-g");
  CHECK(uri_encode("a/b;c", false) == "a%2Fb%3Bc");
  CHECK(amz_date(1369353600) == "20130524T000000Z");
}
