"""libfleetlink installs as an SDK: headers, SONAME'd library, CMake package, pkg-config.

Installs the runtime and sdk components of the CTest build into a temporary prefix and
builds a small consumer out of tree twice: with find_package(fleetlink) and with
pkg-config. Also checks that the installed headers do not pull in msgpack or
libwebsockets, and that the library exports no msgpack symbols.
"""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

BUILD_DIR = os.environ.get("FLEETLINK_BUILD_DIR", "")
TIMEOUT = 300

CONSUMER = r"""
#include <fleetlink/codec.hpp>
#include <fleetlink/executor.hpp>
#include <fleetlink/uuid.hpp>
#include <fleetlink/version.hpp>
#include <cstdio>
int main() {
  const fleetlink::msg::Cancel c{fleetlink::uuid_v7().to_string()};
  const auto bytes = fleetlink::encode(c);
  const auto back = fleetlink::decode(bytes);
  if (!back) return 1;
  std::printf("consumer %s %s\n", fleetlink::kVersion, fleetlink::type_name(*back));
  return 0;
}
"""

CMAKE_PROJECT = """
cmake_minimum_required(VERSION 3.25)
project(fleetlink_consumer CXX)
find_package(fleetlink REQUIRED)
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE fleetlink::fleetlink)
"""


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=TIMEOUT, **kw)


class SdkInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        assert BUILD_DIR and os.path.isdir(BUILD_DIR), \
            f"FLEETLINK_BUILD_DIR ({BUILD_DIR!r}) is not a build directory (CTest sets it)"
        cls.tmp = tempfile.mkdtemp(prefix="fleetlink-sdk-install-")
        cls.prefix = os.path.join(cls.tmp, "prefix")
        for component in ("runtime", "sdk"):
            run(["cmake", "--install", BUILD_DIR, "--prefix", cls.prefix,
                 "--component", component])
        libdirs = [d for d in ("lib", "lib64", "lib/x86_64-linux-gnu")
                   if os.path.exists(os.path.join(cls.prefix, d, "pkgconfig", "fleetlink.pc"))]
        assert libdirs, "fleetlink.pc not installed"
        cls.libdir = os.path.join(cls.prefix, libdirs[0])
        cls.src = os.path.join(cls.tmp, "consumer")
        os.makedirs(cls.src)
        with open(os.path.join(cls.src, "main.cpp"), "w") as f:
            f.write(CONSUMER)
        with open(os.path.join(cls.src, "CMakeLists.txt"), "w") as f:
            f.write(CMAKE_PROJECT)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_layout_and_soname(self):
        inc = os.path.join(self.prefix, "include", "fleetlink")
        for h in ("codec.hpp", "messages.hpp", "executor.hpp", "expected.hpp", "version.hpp",
                  "uuid.hpp", "backoff.hpp", "close_codes.hpp", "export.hpp"):
            self.assertTrue(os.path.isfile(os.path.join(inc, h)), h)
        self.assertFalse(os.path.exists(os.path.join(inc, "version.hpp.in")))
        self.assertTrue(os.path.islink(os.path.join(self.libdir, "libfleetlink.so")))
        so0 = os.path.join(self.libdir, "libfleetlink.so.0")
        self.assertTrue(os.path.exists(so0))
        dyn = run(["objdump", "-p", so0]).stdout
        self.assertRegex(dyn, r"SONAME\s+libfleetlink\.so\.0")
        self.assertTrue(os.path.isfile(os.path.join(self.libdir, "cmake", "fleetlink",
                                                    "fleetlinkConfig.cmake")))
        self.assertTrue(os.path.isfile(os.path.join(self.libdir, "cmake", "fleetlink",
                                                    "fleetlinkConfigVersion.cmake")))

    def test_headers_do_not_leak_dependencies(self):
        inc = os.path.join(self.prefix, "include", "fleetlink")
        for name in os.listdir(inc):
            with open(os.path.join(inc, name)) as f:
                text = f.read()
            for dep in ("msgpack", "libwebsockets", "uv.h", "openssl/"):
                self.assertIsNone(re.search(r"#\s*include\s*[<\"]%s" % re.escape(dep), text),
                                  "%s includes %s" % (name, dep))
        symbols = run(["nm", "-D", "--defined-only", "-C",
                       os.path.join(self.libdir, "libfleetlink.so.0")]).stdout
        self.assertNotIn("msgpack::", symbols)

    def test_only_the_api_is_exported(self):
        # Hidden visibility: the session's internals and the TLS session store are
        # not in the dynamic symbol table, the FLEETLINK_API functions are.
        symbols = run(["nm", "-D", "--defined-only", "-C",
                       os.path.join(self.libdir, "libfleetlink.so.0")]).stdout
        for internal in ("fleetlink::detail::", "ClientSession::Impl", "lws_", "TlsSessionStore"):
            self.assertNotIn(internal, symbols)
        for api in ("fleetlink::decode(", "fleetlink::encode(", "fleetlink::uuid_v7()",
                    "fleetlink::ClientSession::run()", "fleetlink::DedupWindow::save("):
            self.assertIn(api, symbols)

    def test_find_package_consumer(self):
        build = os.path.join(self.tmp, "build-cmake")
        run(["cmake", "-S", self.src, "-B", build, "-DCMAKE_PREFIX_PATH=" + self.prefix])
        run(["cmake", "--build", build])
        out = run([os.path.join(build, "consumer")]).stdout
        self.assertRegex(out, r"^consumer \d+\.\d+\.\d+ cancel")

    def test_pkg_config_consumer(self):
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(self.libdir, "pkgconfig"))
        flags = run(["pkg-config", "--cflags", "--libs", "fleetlink"], env=env).stdout.split()
        exe = os.path.join(self.tmp, "consumer-pc")
        # Only what pkg-config says, on top of the compiler's defaults (GCC 12: gnu++17,
        # too old for the headers): the .pc must carry the standard itself.
        self.assertIn("-std=c++20", flags)
        run(["g++", os.path.join(self.src, "main.cpp"), "-o", exe] + flags +
            ["-Wl,-rpath," + self.libdir])
        out = run([exe]).stdout
        self.assertRegex(out, r"^consumer \d+\.\d+\.\d+ cancel")
        version = run(["pkg-config", "--modversion", "fleetlink"], env=env).stdout.strip()
        self.assertRegex(version, r"^\d+\.\d+\.\d+$")


if __name__ == "__main__":
    unittest.main()
