#!/usr/bin/env bash
# Installs every Debian 12 package fleetlink needs to build, test and run its demo.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

packages=(
  # toolchain
  build-essential cmake pkg-config git clang libclang-rt-14-dev
  # libraries
  libwebsockets-dev libwebsockets-evlib-uv libuv1-dev libssl-dev openssl
  libmsgpack-cxx-dev uuid-dev libcli11-dev nlohmann-json3-dev libhiredis-dev
  libcurl4-openssl-dev doctest-dev libmimalloc-dev
  # test drivers and servers
  python3 python3-msgpack python3-websockets redis-server procps util-linux
  # real intermediaries in front of the broker (tests/integration/test_intermediaries.py;
  # the tests run them as their own processes: the packages' services stay off)
  haproxy nginx-light
  # tests/bench/tls_peers: nginx's stream module terminating mutual TLS in front of the broker
  libnginx-mod-stream
  # the dashboard's browser test (tests/browser): headless chromium, driven by playwright-core
  chromium
  # packaging: building and checking the .debs (man pages from --help, lintian),
  # the source RPM and its spec (rpmlint)
  dpkg-dev file rpm help2man lintian rpmlint
  # CI installs the .deb packages into a fresh Debian root (packaging/check-install-in-chroot)
  debootstrap
)

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps.sh: run as root (it calls apt-get)" >&2
  exit 1
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
# node and npm for tests/browser and tests/s3: Debian's nodejs is enough; a node already on the
# machine (any other packaging) is kept.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
echo "install-deps.sh: ${#packages[@]} packages present, node $(node --version)"
# playwright-core, exactly as package-lock.json pins it (it downloads no browser:
# the test launches /usr/bin/chromium).
tests_browser="$(cd "$(dirname "$0")/.." && pwd)/tests/browser"
(cd "$tests_browser" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
echo "install-deps.sh: tests/browser/node_modules ready"
# s3rver, an S3-compatible server for the artifact store's S3 path
# (tests/integration/test_artifacts_s3.py), exactly as package-lock.json pins it.
tests_s3="$(cd "$(dirname "$0")/.." && pwd)/tests/s3"
(cd "$tests_s3" && npm ci --no-audit --no-fund --loglevel=error)
echo "install-deps.sh: tests/s3/node_modules ready"
