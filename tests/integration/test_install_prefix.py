"""`cmake --install` honours the prefix and DESTDIR for everything it installs.

A developer installing the SDK and daemons to a local prefix must not get files in
/etc or /usr/lib/systemd (as root that would overwrite an installed package's
edited config). Only the prefix /usr (the packages') puts configs in /etc, as
GNUInstallDirs does; with DESTDIR even that lands under DESTDIR.

The build tree of the CTest run is installed twice, into temporary directories:
  - to a prefix under /tmp, with destinations outside the prefix forbidden
    (CMAKE_ERROR_ON_ABSOLUTE_INSTALL_DESTINATION, which the install-time rules for
    configs and units obey too), so that a regression fails here instead of
    writing to this machine's /etc;
  - with DESTDIR and the prefix /usr: the layout of the packages, under DESTDIR.
Every path the install reports (and lists in its manifest) must be under the
temporary directory, and the units and configs must name the installed paths.
"""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import harness

BUILD_DIR = harness.BUILD_DIR
INSTALL_SCRIPT = os.path.join(BUILD_DIR, "cmake_install.cmake")
TIMEOUT = 240


def install(args, env=None):
    """Runs the build tree's install script; returns the installed paths it reported."""
    p = subprocess.run(["cmake", *args, "-P", INSTALL_SCRIPT], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT,
                       env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        raise AssertionError(f"install {' '.join(args)} exited {p.returncode}:\n{p.stdout[-6000:]}")
    paths = re.findall(r"^-- (?:Installing|Up-to-date): (.+)$", p.stdout, re.M)
    return paths, p.stdout


def read(path):
    with open(path) as f:
        return f.read()


class InstallPrefix(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(INSTALL_SCRIPT):
            raise AssertionError(f"no {INSTALL_SCRIPT}: configure and build {BUILD_DIR} first")
        cls.tmp = tempfile.mkdtemp(prefix="fleetlink-install-prefix-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_all_under(self, paths, root, log, destdir=""):
        self.assertTrue(paths, f"the install reported no file:\n{log[-3000:]}")
        outside = [p for p in paths if not os.path.realpath(p).startswith(root + os.sep)]
        self.assertEqual(outside, [], f"installed outside {root}")
        # The manifest (install_manifest.txt, whose paths leave DESTDIR out) agrees.
        manifest = os.path.join(BUILD_DIR, "install_manifest.txt")
        listed = read(manifest).split("\n") if os.path.isfile(manifest) else []
        listed = {destdir + p for p in listed if p}
        self.assertTrue(listed, f"empty {manifest}")
        self.assertEqual(sorted(listed - set(paths)), [], f"in {manifest}, not reported by the install")
        files = {p for p in paths if not os.path.isdir(p)}  # the manifest lists files only
        self.assertEqual(sorted(files - listed), [], f"installed, missing from {manifest}")

    def test_local_prefix_keeps_everything_under_it(self):
        prefix = os.path.realpath(os.path.join(self.tmp, "x"))
        paths, log = install([f"-DCMAKE_INSTALL_PREFIX={prefix}",
                              "-DCMAKE_ERROR_ON_ABSOLUTE_INSTALL_DESTINATION=ON"])
        self.assert_all_under(paths, prefix, log)
        installed = set(paths)
        for rel in ("etc/fleetlink/agent.conf", "etc/fleetlink/suites.json",
                    "etc/fleetlink/broker.conf",
                    "lib/systemd/system/fleetlink-agent.service",
                    "lib/systemd/system/fleetlink-broker.service",
                    "bin/fleetlink-agent", "bin/fleetlink-broker", "bin/fleetctl",
                    "include/fleetlink/codec.hpp"):
            self.assertIn(os.path.join(prefix, rel), installed, rel)
        # The units and the agent's config name the installed tree, not /usr or /etc.
        unit = read(os.path.join(prefix, "lib/systemd/system/fleetlink-agent.service"))
        self.assertIn(f"ExecStart={prefix}/bin/fleetlink-agent --config {prefix}/etc/fleetlink/agent.conf",
                      unit)
        unit = read(os.path.join(prefix, "lib/systemd/system/fleetlink-broker.service"))
        self.assertIn(f"ExecStart={prefix}/bin/fleetlink-broker --config {prefix}/etc/fleetlink/broker.conf",
                      unit)
        agent_conf = read(os.path.join(prefix, "etc/fleetlink/agent.conf"))
        self.assertRegex(agent_conf, rf"(?m)^plugin-dir = {re.escape(prefix)}/lib[^ ]*/fleetlink/plugins$")
        self.assertNotIn("@FLEETLINK", unit + agent_conf)
        # Configs keep their restrictive mode (they may name keys and hold a token).
        self.assertEqual(os.stat(os.path.join(prefix, "etc/fleetlink/broker.conf")).st_mode & 0o777, 0o640)

    def test_destdir_with_the_package_prefix(self):
        destdir = os.path.realpath(os.path.join(self.tmp, "destdir"))
        paths, log = install(["-DCMAKE_INSTALL_PREFIX=/usr"], env={"DESTDIR": destdir})
        self.assert_all_under(paths, destdir, log, destdir=destdir)
        installed = set(paths)
        # The packages' layout: /etc for configs (the prefix is /usr), units in /usr/lib.
        for path in ("/etc/fleetlink/agent.conf", "/etc/fleetlink/broker.conf",
                     "/usr/lib/systemd/system/fleetlink-agent.service",
                     "/usr/lib/systemd/system/fleetlink-broker.service", "/usr/bin/fleetlink-agent"):
            self.assertIn(destdir + path, installed, path)
        self.assertFalse(os.path.exists(os.path.join(destdir, "usr/etc")))
        unit = read(os.path.join(destdir, "usr/lib/systemd/system/fleetlink-agent.service"))
        self.assertIn("ExecStart=/usr/bin/fleetlink-agent --config /etc/fleetlink/agent.conf", unit)
        self.assertNotIn(destdir, unit)


if __name__ == "__main__":
    unittest.main()
