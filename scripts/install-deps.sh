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
  # packaging
  dpkg-dev file rpm
)

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps.sh: run as root (it calls apt-get)" >&2
  exit 1
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
echo "install-deps.sh: ${#packages[@]} packages present"
