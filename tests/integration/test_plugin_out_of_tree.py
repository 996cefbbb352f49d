"""Plugins end to end (issue 3 point 6, issue 5 point 5).

The SDK is installed into a temporary prefix (`cmake --install --component sdk`
and `runtime`), the example plugin sdk/examples/hello-plugin is built out of
tree against that installation, once with find_package(fleetlink) and once with
pkg-config, and a real agent loads it from --plugin-dir next to a plugin built
for another ABI version (refused, the agent goes on) and two executable plugins
(one of them crashes with SIGSEGV: a failed result, not a dead agent). Commands
go through a real broker's control API.
"""
import glob
import os
import shutil
import subprocess
import tempfile
import textwrap
import unittest

import harness

EXAMPLE = os.path.join(harness.SOURCE_DIR, "sdk", "examples", "hello-plugin")

WRONG_ABI_SOURCE = textwrap.dedent("""\
    // Built against the installed SDK, but claiming the next ABI version.
    #include <fleetlink/executor.hpp>
    namespace {
    class Future final : public fleetlink::Executor {
     public:
      std::string_view kind() const override { return "future"; }
      void start(const fleetlink::CommandContext&, std::shared_ptr<fleetlink::Reporter> r) override {
        r->finish(fleetlink::Outcome{});
      }
      void cancel(std::string_view) override {}
    };
    }
    extern "C" __attribute__((visibility("default"))) std::uint32_t fleetlink_plugin_abi() {
      return fleetlink::kPluginAbiVersion + 1;
    }
    extern "C" __attribute__((visibility("default"))) fleetlink::Executor*
    fleetlink_plugin_create(const fleetlink::PluginHost*) { return new Future; }
    extern "C" __attribute__((visibility("default"))) void
    fleetlink_plugin_destroy(fleetlink::Executor* e) { delete e; }
    """)

# The executable-plugin example shipped with the SDK.
PYECHO_EXAMPLE = os.path.join(harness.SOURCE_DIR, "sdk", "examples", "exec-plugin", "fleetlink-pyecho")

CRASH = textwrap.dedent("""\
    #!/usr/bin/python3
    # Executable plugin that dies of SIGSEGV (a NULL read through ctypes).
    import ctypes, sys
    sys.stdin.readline()
    print("about to crash", flush=True)
    ctypes.string_at(0)
    """)


def run(argv, **kw):
    """Run a build step; on failure the assertion shows its output."""
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240, **kw)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({p.returncode}):\n"
                             + p.stdout.decode("utf-8", "replace")[-4000:])
    return p.stdout.decode("utf-8", "replace")


def exported_symbols(path):
    out = run(["nm", "-D", "--defined-only", path])
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


class InstalledSdk:
    """libfleetlink installed from the build tree into a temporary prefix."""

    def __init__(self, root):
        self.prefix = os.path.join(root, "prefix")
        for component in ("sdk", "runtime"):
            run(["cmake", "--install", harness.BUILD_DIR, "--prefix", self.prefix,
                 "--component", component])
        pcs = glob.glob(os.path.join(self.prefix, "**", "fleetlink.pc"), recursive=True)
        if not pcs:
            raise AssertionError(f"no fleetlink.pc installed under {self.prefix}")
        self.pkg_config_path = os.path.dirname(pcs[0])
        self.libdir = os.path.dirname(self.pkg_config_path)

    def env(self):
        env = dict(os.environ)
        env["PKG_CONFIG_PATH"] = self.pkg_config_path
        return env


class PluginBuilds:
    """The example plugin built both ways, plus the wrong-ABI plugin."""

    def __init__(self, root, sdk):
        self.root = root
        src = os.path.join(root, "hello-plugin")
        shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build*", "*.so"))
        # 1. CMake: find_package(fleetlink) from the installed prefix only.
        cmake_build = os.path.join(root, "build-cmake")
        run(["cmake", "-S", src, "-B", cmake_build, f"-DCMAKE_PREFIX_PATH={sdk.prefix}",
             "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"])
        run(["cmake", "--build", cmake_build])
        self.cmake_so = os.path.join(cmake_build, "fleetlink-hello.so")
        with open(os.path.join(cmake_build, "CMakeCache.txt")) as f:
            self.cmake_cache = f.read()
        # 2. make + pkg-config, in a separate copy.
        mk = os.path.join(root, "hello-make")
        shutil.copytree(EXAMPLE, mk, ignore=shutil.ignore_patterns("build*", "*.so"))
        self.make_output = run(["make", "-C", mk, f"PKG_CONFIG_PATH={sdk.pkg_config_path}"],
                               env=sdk.env())
        self.make_so = os.path.join(mk, "fleetlink-hello.so")
        # 3. A plugin for the next ABI version, against the same installed headers.
        wrong_src = os.path.join(root, "future_plugin.cpp")
        with open(wrong_src, "w") as f:
            f.write(WRONG_ABI_SOURCE)
        self.wrong_abi_so = os.path.join(root, "future-abi.so")
        cflags = run(["pkg-config", "--cflags", "fleetlink"], env=sdk.env()).split()
        run([os.environ.get("CXX", "c++"), "-std=c++20", "-shared", "-fPIC", *cflags,
             wrong_src, "-o", self.wrong_abi_so])


_shared = {}


def setUpModule():
    # One installation and one set of builds for every test in this file.
    _shared["tmp"] = tempfile.mkdtemp(prefix="fleetlink-plugin-oot-")
    _shared["sdk"] = InstalledSdk(_shared["tmp"])
    _shared["builds"] = PluginBuilds(_shared["tmp"], _shared["sdk"])


def tearDownModule():
    if "tmp" in _shared:
        shutil.rmtree(_shared["tmp"], ignore_errors=True)


class OutOfTreeBuildTest(unittest.TestCase):
    """The example plugin builds against the installed SDK, both ways."""

    @classmethod
    def setUpClass(cls):
        cls.sdk = _shared["sdk"]
        cls.builds = _shared["builds"]

    def test_cmake_build_uses_the_installed_package(self):
        self.assertTrue(os.path.isfile(self.builds.cmake_so))
        self.assertIn(f"fleetlink_DIR:PATH={self.sdk.prefix}", self.builds.cmake_cache)
        syms = exported_symbols(self.builds.cmake_so)
        for s in ("fleetlink_plugin_abi", "fleetlink_plugin_create", "fleetlink_plugin_destroy"):
            self.assertIn(s, syms)

    def test_pkg_config_build(self):
        self.assertTrue(os.path.isfile(self.builds.make_so), self.builds.make_output)
        self.assertIn(self.sdk.prefix, run(["pkg-config", "--cflags", "--libs", "fleetlink"],
                                           env=self.sdk.env()))
        syms = exported_symbols(self.builds.make_so)
        self.assertIn("fleetlink_plugin_create", syms)
        # Only the entry points are exported (visibility hidden for the rest).
        self.assertFalse([s for s in syms if "HelloExecutor" in s], syms)

    def test_installed_headers_do_not_need_msgpack_or_libwebsockets(self):
        inc = os.path.join(self.sdk.prefix, "include", "fleetlink")
        for path in glob.glob(os.path.join(inc, "executor.hpp")):
            with open(path) as f:
                text = f.read()
            self.assertNotIn("msgpack", text)
            self.assertNotIn("libwebsockets", text)


class PluginAgentTest(harness.LabTestCase):
    """A real agent with the out-of-tree plugin, behind a real broker."""

    @classmethod
    def setUpClass(cls):
        cls.sdk = _shared["sdk"]
        cls.builds = _shared["builds"]

    def start(self, so_path):
        plugin_dir = self.lab.path("plugins")
        os.makedirs(plugin_dir)
        shutil.copy(so_path, os.path.join(plugin_dir, "fleetlink-hello.so"))
        self.wrong = os.path.join(plugin_dir, "future-abi.so")
        shutil.copy(self.builds.wrong_abi_so, self.wrong)
        shutil.copy(PYECHO_EXAMPLE, os.path.join(plugin_dir, "fleetlink-pyecho"))
        crash = os.path.join(plugin_dir, "fleetlink-crash")
        with open(crash, "w") as f:
            f.write(CRASH)
        os.chmod(crash, 0o755)
        broker = self.lab.broker()
        agent = self.lab.agent("rig-plug", broker, plugin_dir=plugin_dir,
                               plugin_config="greeting=hi")
        broker.wait_rigs(["rig-plug"])
        return broker, agent

    def check_hello(self, broker, agent):
        kinds = set(broker.rigs()["rig-plug"]["kinds"])
        self.assertTrue({"hello", "pyecho", "crash"} <= kinds, kinds)
        self.assertNotIn("future", kinds)
        # Refused cleanly, with the file and both ABI versions in the log.
        m = agent.wait_log(r"future-abi\.so refused: plugin ABI version (\d+), agent ABI version (\d+)")
        self.assertEqual(int(m.group(1)), int(m.group(2)) + 1)

        cmd = broker.run("rig-plug", "hello", {"name": "world", "n": 3})
        self.assertEqual(cmd["state"], "succeeded", cmd)
        res = cmd["result"]
        self.assertEqual(res["status"], "ok", res)
        self.assertEqual(res["output"],
                         "hello from rig-plug (plugin config: greeting=hi): n=3 name=world\n")

    def test_cmake_built_plugin_runs_in_a_real_agent(self):
        broker, agent = self.start(self.builds.cmake_so)
        self.check_hello(broker, agent)

    def test_pkg_config_built_plugin_and_executable_plugins(self):
        broker, agent = self.start(self.builds.make_so)
        self.check_hello(broker, agent)

        echo = broker.run("rig-plug", "pyecho", {"a": "1", "b": "two"})
        res = echo["result"]
        self.assertEqual(res["status"], "ok", res)
        self.assertEqual(res["output"], 'pyecho 1 pyecho {"a": "1", "b": "two"}\n')
        self.assertEqual(res["detail"], "echoed 2 args")
        refused = broker.run("rig-plug", "pyecho", {"fail": "yes"})
        self.assertEqual(refused["result"]["status"], "failed", refused)
        self.assertEqual(refused["result"]["exit_code"], 1, refused)

        crash = broker.run("rig-plug", "crash")
        res = crash["result"]
        self.assertEqual(res["status"], "failed", res)
        self.assertEqual(res["signal"], 11, res)
        self.assertIn("SIGSEGV", res["detail"])
        self.assertEqual(res["output"], "about to crash\n")

        # The agent lived through it and still answers.
        self.assertTrue(agent.alive())
        again = broker.run("rig-plug", "hello", {"after": "crash"})
        self.assertEqual(again["result"]["status"], "ok", again)


if __name__ == "__main__":
    unittest.main()
