"""Packaging: cpack turns the build tree into the four Debian packages (and a
-dbgsym package of debug info for each binary one), and what is inside them is
what an operator installs: stripped binaries, the shared library with its SONAME
links, headers and CMake/pkg-config files, systemd units, default configs marked
as conffiles, maintainer scripts, man pages, copyright and changelog, and the
dependencies that dpkg-shlibdeps cannot see (the libwebsockets libuv plugin).

lintian reports no error on any of them (its warnings are the ones
docs/OPERATIONS.md lists, each with its reason), the binaries carry the hardening
flags, and dpkg-gensymbols checks the library against its symbols file
(packaging/deb/libfleetlink0.symbols): a symbol that disappears is an ABI break.

RPMs are built from source by packaging/rpm/fleetlink.spec on the RPM
distribution; here its source RPM is built (rpmbuild -bs) and rpmlint reports no
error on the spec or the source RPM. CPack makes no RPM.

The default configs are also checked against the real programs: every option a
daemon's --help lists is documented in its config file and every key documented
there is a real option; with all of them uncommented the packaged broker starts
and the packaged agent's --check-config passes.

Nothing is installed on this machine: packages are built into a temporary
directory and unpacked there with dpkg-deb -x.
"""
import glob
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import unittest

import harness

BUILD_DIR = harness.BUILD_DIR
SOURCE_DIR = harness.SOURCE_DIR
CPACK_CONFIG = os.path.join(BUILD_DIR, "CPackConfig.cmake")

LIBRARY = "libfleetlink0"  # named after the SONAME libfleetlink.so.0
PACKAGES = (LIBRARY, "libfleetlink-dev", "fleetlink-agent", "fleetlink-broker")
BINARY_PACKAGES = (LIBRARY, "fleetlink-agent", "fleetlink-broker")  # each has a -dbgsym
PROGRAMS = {"fleetlink-agent": ("fleetlink-agent",),
            "fleetlink-broker": ("fleetlink-broker", "fleetctl", "fleetlink-lab-ca")}
SYMBOLS_FILE = os.path.join(SOURCE_DIR, "packaging", "deb", "libfleetlink0.symbols")
OPERATIONS_MD = os.path.join(SOURCE_DIR, "docs", "OPERATIONS.md")
SPEC = os.path.join(SOURCE_DIR, "packaging", "rpm", "fleetlink.spec")
RPMLINT_CONFIG = os.path.join(SOURCE_DIR, "packaging", "rpm", "rpmlint.toml")
LWS_DEPENDS = ("libwebsockets17", "libwebsockets-evlib-uv")
# Options that are not settings, so the config files do not list them.
NOT_CONFIG_KEYS = {"help", "config", "version", "check-config", "hash-token"}  # actions, not settings


def run(argv, timeout=240, check=True, **kw):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {p.returncode}:\n{p.stdout[-6000:]}")
    return p.stdout


def project_version():
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
        m = re.search(r"project\(fleetlink\s+VERSION\s+([0-9.]+)", f.read())
    return m.group(1)


def deb_depends(field):
    """'a (>= 1), b | c' -> {'a': '(>= 1)', 'b': '', 'c': ''}"""
    out = {}
    for alt in re.split(r"[,|]", field):
        alt = alt.strip()
        if alt:
            name, _, rest = alt.partition(" ")
            out[name] = rest.strip()
    return out


def parse_unit(path):
    """systemd unit -> {section: {key: [values...]}} (keys may repeat)."""
    units, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = units.setdefault(line.strip("[]"), {})
                continue
            key, _, value = line.partition("=")
            section.setdefault(key.strip(), []).append(value.strip())
    return units


def seconds(text):
    m = re.fullmatch(r"(\d+)\s*(ms|s|min)?", text)
    n, unit = int(m.group(1)), m.group(2) or "s"
    return n / 1000 if unit == "ms" else n * 60 if unit == "min" else n


def documented_options(conf_path):
    """Keys shown in a config file, commented ('# key = value') or set ('key = value')."""
    keys = {}
    with open(conf_path) as f:
        for line in f:
            m = re.match(r"^(?:# )?([a-z][a-z0-9-]*) =(?: (.*))?$", line.rstrip("\n"))
            if m:
                keys.setdefault(m.group(1), []).append(m.group(2) or "")
    return keys


def help_options(program, env):
    """({option names}, {option: default shown by --help})"""
    text = run([program, "--help"], timeout=30, env=env)
    names = set(re.findall(r"--([a-z][a-z0-9-]*)", text)) - NOT_CONFIG_KEYS
    # CLI11 shows captured defaults as "--name TYPE=DEFAULT" or "--name TYPE:{a,b}=DEFAULT".
    defaults = {}
    for m in re.finditer(r"^\s+--([a-z][a-z0-9-]*) [A-Z]+(?::\{[^}]*\}|:[A-Z]+)?=(\S.*?)(?:[ \t]{2,}|$)",
                         text, re.M):
        defaults[m.group(1)] = m.group(2).strip()
    return names, defaults


def write_uncommented(conf_path, out_path, replace):
    """Copy a config with every '# key = value' option line uncommented; values of
    keys in `replace` are substituted (a list value writes the key once per item)."""
    written = set()
    with open(conf_path) as f, open(out_path, "w") as out:
        for line in f:
            m = re.match(r"^(?:# )?([a-z][a-z0-9-]*) = (.+)$", line.rstrip("\n"))
            if not m:
                out.write(line)
                continue
            key, value = m.group(1), m.group(2)
            if key in replace:
                if key in written:
                    continue
                written.add(key)
                values = replace[key] if isinstance(replace[key], list) else [replace[key]]
                for v in values:
                    out.write(f"{key} = {v}\n")
            else:
                out.write(f"{key} = {value}\n")
        for key, v in replace.items():
            if key not in written:
                for item in (v if isinstance(v, list) else [v]):
                    out.write(f"{key} = {item}\n")


def require_tools(*tools):
    """A test that cannot run fails, saying what is missing (scripts/install-deps.sh
    installs every one of these)."""
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        raise AssertionError(f"missing {', '.join(missing)}: run scripts/install-deps.sh")
    if not os.path.isfile(CPACK_CONFIG):
        raise AssertionError(f"no {CPACK_CONFIG}: configure and build {BUILD_DIR} first")


class DebianPackages(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_tools("cpack", "dpkg-deb", "lintian", "dpkg-gensymbols", "readelf", "objdump", "file")
        cls.tmp = tempfile.mkdtemp(prefix="fleetlink-pkg-")
        try:
            cls.build_and_unpack()
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)  # tearDownClass does not run
            raise

    @classmethod
    def build_and_unpack(cls):
        out_dir = os.path.join(cls.tmp, "deb")
        cls.cpack_log = run(["cpack", "--config", CPACK_CONFIG, "-G", "DEB", "-B", out_dir])
        cls.version = project_version()
        cls.debs, cls.fields, cls.files, cls.control = {}, {}, {}, {}
        cls.root = os.path.join(cls.tmp, "root")
        cls.ddebs = {}
        for ddeb in glob.glob(os.path.join(out_dir, "*.ddeb")):
            cls.ddebs[run(["dpkg-deb", "-f", ddeb, "Package"]).strip()] = ddeb
        for deb in glob.glob(os.path.join(out_dir, "*.deb")):
            name = run(["dpkg-deb", "-f", deb, "Package"]).strip()
            cls.debs[name] = deb
            info = run(["dpkg-deb", "-f", deb])
            fields, last = {}, None
            for line in info.splitlines():
                if line.startswith(" ") and last:
                    fields[last] += "\n" + line
                else:
                    last, _, value = line.partition(":")
                    fields[last] = value.strip()
            cls.fields[name] = fields
            listing = {}
            for line in run(["dpkg-deb", "-c", deb]).splitlines():
                # drwxr-xr-x root/root 0 2026-11-29 20:38 ./usr/lib/x -> y
                parts = line.split(None, 5)
                path, _, target = parts[5].partition(" -> ")
                listing[path.lstrip(".").rstrip("/") or "/"] = (parts[0], parts[1], target)
            cls.files[name] = listing
            ctl = os.path.join(cls.tmp, "control", name)
            os.makedirs(os.path.dirname(ctl), exist_ok=True)
            run(["dpkg-deb", "-e", deb, ctl])
            cls.control[name] = ctl
            run(["dpkg-deb", "-x", deb, cls.root])
        # Packaged programs find the packaged libfleetlink through LD_LIBRARY_PATH.
        libdirs = sorted({os.path.dirname(p) for p in
                          glob.glob(os.path.join(cls.root, "usr", "lib*", "**", "libfleetlink.so*"),
                                    recursive=True)})
        cls.env = dict(os.environ, LD_LIBRARY_PATH=":".join(libdirs))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- helpers ---------------------------------------------------------------
    def listing(self, package):
        self.assertIn(package, self.files, f"package {package} not built:\n{self.cpack_log[-3000:]}")
        return self.files[package]

    def assert_has(self, package, path, kind="-"):
        files = self.listing(package)
        self.assertIn(path, files, f"{package} lacks {path}; it has:\n" + "\n".join(sorted(files)))
        self.assertEqual(files[path][0][0], kind, f"{path} in {package}: {files[path]}")
        return files[path]

    def find(self, package, pattern):
        rx = re.compile(pattern)
        return sorted(p for p in self.listing(package) if rx.search(p))

    def depends(self, package):
        return deb_depends(self.fields[package].get("Depends", ""))

    def control_file(self, package, name):
        path = os.path.join(self.control[package], name)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return f.read()

    def packaged(self, relpath):
        return os.path.join(self.root, relpath.lstrip("/"))

    # ---- the set of packages ---------------------------------------------------
    def test_four_packages_with_the_project_version(self):
        self.assertEqual(sorted(self.debs), sorted(PACKAGES), self.cpack_log[-3000:])
        for name, fields in self.fields.items():
            self.assertTrue(fields["Version"].startswith(self.version + "-"), (name, fields["Version"]))
            self.assertTrue(fields.get("Maintainer"), name)
            synopsis = fields["Description"].splitlines()[0]
            self.assertIn("fleetlink", synopsis, name)
            self.assertTrue(os.path.basename(self.debs[name]).startswith(f"{name}_{self.version}-"))

    # ---- libfleetlink0 ---------------------------------------------------------
    def library_file(self):
        real = self.find(LIBRARY, r"/libfleetlink\.so\.\d+\.\d+\.\d+$")
        self.assertEqual(len(real), 1, self.listing(LIBRARY))
        return real[0]

    def test_library_package_has_the_soname_chain(self):
        real = [self.library_file()]
        self.assert_has(LIBRARY, real[0], "-")
        major = re.search(r"\.so\.(\d+)\.", real[0]).group(1)
        self.assertEqual(LIBRARY, f"libfleetlink{major}", "the package is named after the SONAME")
        soname_link = os.path.join(os.path.dirname(real[0]), f"libfleetlink.so.{major}")
        _, _, target = self.assert_has(LIBRARY, soname_link, "l")
        self.assertEqual(target, os.path.basename(real[0]))
        # The SONAME inside the ELF file is the link's name.
        dyn = run(["objdump", "-p", self.packaged(real[0])]) if shutil.which("objdump") else ""
        if dyn:
            self.assertRegex(dyn, rf"SONAME\s+libfleetlink\.so\.{major}\b")
        # The bare .so (for linking) belongs to the -dev package only.
        self.assertFalse(self.find(LIBRARY, r"/libfleetlink\.so$"))
        self.assertFalse(self.find(LIBRARY, r"^/usr/include"))
        shlibs = self.control_file(LIBRARY, "shlibs") or ""
        self.assertRegex(shlibs, rf"^libfleetlink {major} {LIBRARY} ")
        # ldconfig through a dpkg trigger (lintian: lacks-ldconfig-trigger).
        self.assertIn("activate-noawait ldconfig", (self.control_file(LIBRARY, "triggers") or "").splitlines())

    def test_library_symbols_file_catches_an_abi_break(self):
        """The symbols file shipped in libfleetlink0 matches the built library; a
        symbol that disappears (here: one added to a copy of the file) fails."""
        shipped = self.control_file(LIBRARY, "symbols") or ""
        with open(SYMBOLS_FILE) as f:
            self.assertEqual(shipped, f.read(), "libfleetlink0 ships packaging/deb/libfleetlink0.symbols")
        lib = self.packaged(self.library_file())

        def gensymbols(symbols_file, level):
            return subprocess.run(
                # A version after every recorded one: dpkg-gensymbols forgives the loss
                # of a symbol the current version itself introduced.
                ["dpkg-gensymbols", f"-p{LIBRARY}", f"-v{self.version}+abi.check", f"-e{lib}",
                 f"-I{symbols_file}", f"-O{os.path.join(self.tmp, 'symbols.out')}", f"-c{level}"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                cwd=self.tmp)

        # Level 1: no symbol of the file may be missing from the library (an ABI break).
        out = gensymbols(SYMBOLS_FILE, 1)
        self.assertEqual(out.returncode, 0, "libfleetlink lost symbols (ABI break: bump the SONAME, "
                                            "or restore them):\n" + out.stdout[-6000:])
        # Every exported fleetlink symbol is recorded (new API goes into the file with
        # the version that added it); compiler-generated std:: instances may vary.
        api = re.compile(r"^(?:[\w ]+ (?:for|to) )?(?:\S+ )?fleetlink::")  # as update-symbols
        new = [l for l in out.stdout.splitlines()
               if l.startswith("+ ") and api.match(run(["c++filt", l[2:].split("@")[0]]).strip())]
        self.assertEqual(new, [], "symbols exported by libfleetlink but missing from "
                                  "packaging/deb/libfleetlink0.symbols:\n" + out.stdout[-6000:])
        # And the check can fail: a symbol the library does not have is an ABI break.
        broken = os.path.join(self.tmp, "broken.symbols")
        with open(SYMBOLS_FILE) as f, open(broken, "w") as g:
            lines = f.read().splitlines()
            at = next(i for i, l in enumerate(lines) if l.startswith("libfleetlink.so.")) + 1
            g.write("\n".join(lines[:at] + [" _ZN9fleetlink18removed_in_a_breakEv@Base 0.1.0"] + lines[at:]) + "\n")
        out = gensymbols(broken, 1)
        self.assertNotEqual(out.returncode, 0, out.stdout)
        self.assertIn("removed_in_a_break", out.stdout)

    def test_library_depends_on_libwebsockets_and_its_libuv_plugin(self):
        deps = self.depends(LIBRARY)
        for name in LWS_DEPENDS:
            self.assertIn(name, deps, self.fields[LIBRARY]["Depends"])
        for name in ("libc6", "libstdc++6", "libuv1"):  # from dpkg-shlibdeps
            self.assertIn(name, deps, self.fields[LIBRARY]["Depends"])

    # ---- libfleetlink-dev ------------------------------------------------------
    def test_dev_package_has_headers_namelink_cmake_and_pkgconfig(self):
        links = self.find("libfleetlink-dev", r"/libfleetlink\.so$")
        self.assertEqual(len(links), 1, self.listing("libfleetlink-dev"))
        _, _, target = self.assert_has("libfleetlink-dev", links[0], "l")
        self.assertRegex(target, r"^libfleetlink\.so\.\d+$")
        for header in ("messages.hpp", "codec.hpp", "executor.hpp", "expected.hpp", "version.hpp"):
            self.assert_has("libfleetlink-dev", f"/usr/include/fleetlink/{header}")
        self.assertTrue(self.find("libfleetlink-dev", r"/cmake/fleetlink/fleetlink(-config|Config)\.cmake$"),
                        "no CMake package config in libfleetlink-dev")
        pcs = self.find("libfleetlink-dev", r"/pkgconfig/fleetlink\.pc$")
        self.assertTrue(pcs, "no fleetlink.pc in libfleetlink-dev")
        with open(self.packaged(pcs[0])) as f:
            pc = f.read()
        self.assertNotIn("/usr/local", pc, "the packaged .pc points outside the package's /usr")
        self.assertIn("-std=c++20", re.search(r"(?m)^Cflags:.*$", pc).group(0))
        self.assertEqual(self.depends("libfleetlink-dev").get(LIBRARY), f"(= {self.fields[LIBRARY]['Version']})")

    # ---- fleetlink-agent -------------------------------------------------------
    def test_agent_package_contents(self):
        self.assert_has("fleetlink-agent", "/usr/bin/fleetlink-agent")
        self.assert_has("fleetlink-agent", "/usr/lib/systemd/system/fleetlink-agent.service")
        for conf in ("agent.conf", "suites.json"):
            mode, owner, _ = self.assert_has("fleetlink-agent", f"/etc/fleetlink/{conf}")
            self.assertEqual(mode, "-rw-r-----", conf)
            self.assertEqual(owner, "root/root", conf)
        self.assertFalse(self.find("fleetlink-agent", r"fleetlink-broker|fleetctl|libfleetlink\.so"))
        self.assertEqual(sorted((self.control_file("fleetlink-agent", "conffiles") or "").split()),
                         ["/etc/fleetlink/agent.conf", "/etc/fleetlink/suites.json"])

    def test_broker_package_contents(self):
        for prog in ("fleetlink-broker", "fleetctl", "fleetlink-lab-ca"):
            mode, _, _ = self.assert_has("fleetlink-broker", f"/usr/bin/{prog}")
            self.assertEqual(mode, "-rwxr-xr-x", prog)
        self.assert_has("fleetlink-broker", "/usr/lib/systemd/system/fleetlink-broker.service")
        self.assert_has("fleetlink-broker", "/etc/fleetlink/broker.conf")
        self.assertFalse(self.find("fleetlink-broker", r"fleetlink-agent|libfleetlink\.so"))
        self.assertEqual((self.control_file("fleetlink-broker", "conffiles") or "").split(),
                         ["/etc/fleetlink/broker.conf"])

    def test_daemon_dependencies(self):
        lib_version = self.fields[LIBRARY]["Version"]
        for pkg in ("fleetlink-agent", "fleetlink-broker"):
            deps = self.depends(pkg)
            field = self.fields[pkg]["Depends"]
            self.assertEqual(deps.get(LIBRARY), f"(= {lib_version})", field)
            for name in LWS_DEPENDS + ("adduser", "libc6", "libssl3"):
                self.assertIn(name, deps, f"{pkg}: {field}")
        self.assertIn("openssl", self.depends("fleetlink-broker"))  # fleetlink-lab-ca

    # ---- maintainer scripts ----------------------------------------------------
    def test_maintainer_scripts(self):
        for pkg in ("fleetlink-agent", "fleetlink-broker"):
            for script in ("postinst", "prerm", "postrm"):
                path = os.path.join(self.control[pkg], script)
                self.assertTrue(os.path.isfile(path), f"{pkg} has no {script}")
                self.assertTrue(os.stat(path).st_mode & stat.S_IXUSR, f"{pkg} {script} not executable")
                run(["sh", "-n", path])
            postinst = self.control_file(pkg, "postinst")
            self.assertRegex(postinst, r"adduser --system[^\n]*--group")
            self.assertIn("/var/lib/fleetlink", postinst)
            self.assertRegex(postinst, r"install -d -m 0750[^\n]*/var/lib/fleetlink|\$statedir")
            self.assertIn("daemon-reload", postinst)
            self.assertIn("/etc/fleetlink", postinst)
            # Never starts a service on install (only try-restart on upgrade).
            self.assertNotRegex(postinst, r"(?m)^\s*(systemctl|deb-systemd-invoke)\s+(--\S+\s+)*(enable|start)\b")
            self.assertIn("deb-systemd-invoke stop", self.control_file(pkg, "prerm"))
            # Services through deb-systemd-helper/-invoke: systemctl only reloads systemd.
            for script in ("postinst", "prerm", "postrm"):
                for line in self.control_file(pkg, script).splitlines():
                    if re.match(r"^(?:.+;)?\s*systemctl\b", line):
                        self.assertIn("daemon-reload", line, f"{pkg} {script}: {line}")

    def run_script_with_stubs(self, pkg, script, *args, installed_before=False):
        """Run a maintainer script with every command that changes the system
        replaced by a stub that records its arguments; returns the recorded calls.
        installed_before: deb-systemd-helper knows the unit, which was enabled."""
        stubs = tempfile.mkdtemp(dir=self.tmp)
        calls = os.path.join(stubs, "calls")
        # getent finds nothing and dpkg-statoverride --list has no override: a first install.
        behaviour = {"getent": "exit 2", "dpkg-statoverride": 'case "$1" in --list) exit 1;; esac',
                     "deb-systemd-helper": "" if installed_before else
                     'case "$1 $2" in debian-installed*|"--quiet was-enabled") exit 1;; esac'}
        for cmd in ("getent", "adduser", "addgroup", "useradd", "groupadd", "dpkg-statoverride",
                    "install", "chgrp", "chown", "chmod", "systemctl", "deb-systemd-helper",
                    "deb-systemd-invoke", "ldconfig", "rm", "rmdir"):
            with open(os.path.join(stubs, cmd), "w") as f:
                f.write(f'#!/bin/sh\necho "{cmd} $*" >> "{calls}"\n{behaviour.get(cmd, "")}\nexit 0\n')
            os.chmod(os.path.join(stubs, cmd), 0o755)
        env = dict(os.environ, PATH=stubs + ":/usr/bin:/bin")
        out = subprocess.run(["sh", os.path.join(self.control[pkg], script), *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stdout)
        if not os.path.exists(calls):
            return []
        with open(calls) as f:
            return f.read().splitlines()

    def test_postinst_first_install(self):
        for pkg in ("fleetlink-agent", "fleetlink-broker"):
            calls = self.run_script_with_stubs(pkg, "postinst", "configure", "")
            text = "\n".join(calls)
            self.assertRegex(text, r"(?m)^adduser --system --group .*--home /var/lib/fleetlink .*fleetlink$")
            self.assertIn("dpkg-statoverride --update --add root fleetlink 0750 /etc/fleetlink", calls)
            if pkg == "fleetlink-broker":
                self.assertIn("dpkg-statoverride --update --add root fleetlink 0640 /etc/fleetlink/broker.conf",
                              calls)
            if not os.path.isdir("/var/lib/fleetlink"):
                self.assertIn("install -d -m 0750 -o root -g fleetlink /var/lib/fleetlink", calls)
            self.assertFalse([c for c in calls if re.match(r"systemctl (enable|start|restart)", c)], calls)
            self.assertFalse([c for c in calls if re.match(r"deb-systemd-(helper enable|invoke (start|restart))", c)],
                             calls)
            self.assertIn(f"deb-systemd-helper update-state {pkg}.service", calls)

    def test_postinst_upgrade_keeps_an_enabled_unit_enabled(self):
        for pkg in ("fleetlink-agent", "fleetlink-broker"):
            calls = self.run_script_with_stubs(pkg, "postinst", "configure", "0.0.9-1",
                                               installed_before=True)
            self.assertIn(f"deb-systemd-helper unmask {pkg}.service", calls)
            self.assertIn(f"deb-systemd-helper enable {pkg}.service", calls)

    def test_prerm_remove_and_postrm_purge(self):
        for pkg in ("fleetlink-agent", "fleetlink-broker"):
            calls = self.run_script_with_stubs(pkg, "prerm", "remove")
            self.assertFalse([c for c in calls if c.startswith("systemctl")], calls)
            if os.path.isdir("/run/systemd/system"):
                self.assertIn(f"deb-systemd-invoke stop {pkg}.service", calls)
            calls = self.run_script_with_stubs(pkg, "postrm", "remove")
            self.assertIn(f"deb-systemd-helper mask {pkg}.service", calls)
            calls = self.run_script_with_stubs(pkg, "postrm", "purge")
            self.assertIn(f"deb-systemd-helper purge {pkg}.service", calls)
            # The user and the agent's state survive a purge.
            self.assertFalse([c for c in calls if re.match(r"(deluser|userdel|rm) ", c)], calls)

    # ---- systemd units ---------------------------------------------------------
    def unit(self, name):
        path = self.packaged(f"/usr/lib/systemd/system/{name}.service")
        self.assertTrue(os.path.isfile(path), path)
        return path, parse_unit(path)

    def test_broker_unit(self):
        path, unit = self.unit("fleetlink-broker")
        svc = unit["Service"]
        self.assertEqual(svc["Type"], ["simple"])
        self.assertEqual(svc["User"], ["fleetlink"])
        self.assertEqual(svc["Restart"], ["on-failure"])
        self.assertIn("RestartSec", svc)
        self.assertEqual(svc["LimitNOFILE"], ["65536"])
        self.assertEqual(svc["KillSignal"], ["SIGTERM"])
        # Longer than the default drain deadline (window 10 s + 5 s).
        self.assertGreater(seconds(svc["TimeoutStopSec"][0]), 15)
        # SIGHUP re-reads the CAs, CRLs, certificate, key and operators (test_broker_reload.py).
        self.assertEqual(svc["ExecReload"], ["/bin/kill -HUP $MAINPID"])
        self.assertEqual(svc["ExecStart"], ["/usr/bin/fleetlink-broker --config /etc/fleetlink/broker.conf"])
        self.assertEqual(svc.get("NoNewPrivileges"), ["yes"])
        self.assertEqual(unit["Install"]["WantedBy"], ["multi-user.target"])
        self.verify_unit(path)

    def test_agent_unit(self):
        path, unit = self.unit("fleetlink-agent")
        svc = unit["Service"]
        self.assertEqual(svc["Type"], ["simple"])
        self.assertIn(svc.get("User", ["root"]), (["root"],))  # reboots the rig, switches users
        self.assertEqual(svc["Restart"], ["on-failure"])
        self.assertIn("RestartSec", svc)
        # Inherited by every suite the agent starts: must not be set (see the unit's comments).
        for forbidden in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "ProtectHome",
                          "PrivateDevices", "ProtectKernelLogs"):
            self.assertNotIn(forbidden, svc, forbidden)
        self.assertEqual(svc["ExecStart"], ["/usr/bin/fleetlink-agent --config /etc/fleetlink/agent.conf"])
        self.verify_unit(path)

    def verify_unit(self, path):
        """systemd-analyze verify, with ExecStart pointing at the unpacked binary."""
        if not shutil.which("systemd-analyze"):
            return
        d = tempfile.mkdtemp(dir=self.tmp)
        with open(path) as f:
            text = f.read()
        text = re.sub(r"ExecStart=/usr/bin/(\S+)", lambda m: "ExecStart=" + self.packaged("/usr/bin/" + m.group(1)), text)
        copy = os.path.join(d, os.path.basename(path))
        with open(copy, "w") as f:
            f.write(text)
        out = run(["systemd-analyze", "verify", copy], timeout=60, check=False)
        problems = [l for l in out.splitlines() if os.path.basename(path) in l and "User" not in l]
        self.assertEqual(problems, [], out)

    # ---- the configs match the programs ---------------------------------------
    def check_config_documents_options(self, program, conf):
        prog = self.packaged(f"/usr/bin/{program}")
        if not os.path.isfile(prog):
            self.fail(f"{program} is not in its package: was it built?")
        options = documented_options(self.packaged(conf))
        documented = set(options)
        real, defaults = help_options(prog, self.env)
        self.assertEqual(sorted(real - documented), [], f"options of {program} missing from {conf}")
        self.assertEqual(sorted(documented - real), [], f"keys in {conf} that {program} does not know")
        # Where --help shows a default, the commented line documenting it says the same.
        commented = {}
        with open(self.packaged(conf)) as f:
            for line in f:
                m = re.match(r"^# ([a-z][a-z0-9-]*) = (.+)$", line.rstrip("\n"))
                if m:
                    commented.setdefault(m.group(1), m.group(2))
        # (--help may leave a single space between the default and the description.)
        wrong = {k: (commented[k], d) for k, d in defaults.items()
                 if k in commented and not d.startswith("[")
                 and d != commented[k] and not d.startswith(commented[k] + " ")}
        self.assertEqual(wrong, {}, f"{conf}: documented default != {program} --help default")
        return prog

    def test_broker_conf_is_true_and_starts_the_broker(self):
        prog = self.check_config_documents_options("fleetlink-broker", "/etc/fleetlink/broker.conf")
        with harness.Lab(prefix="fleetlink-pkg-lab-") as lab:
            token = lab.path("control-token")
            with open(token, "w") as f:
                f.write("s3cret\n")
            # The S3 artifact store's example settings, uncommented, need their key files.
            s3_keys = {}
            for name, text in (("access", "AKIAEXAMPLE\n"), ("secret", "example-secret\n")):
                s3_keys[name] = lab.path(f"s3-{name}-key")
                with open(s3_keys[name], "w") as f:
                    f.write(text)
                os.chmod(s3_keys[name], 0o600)
            conf = lab.path("broker.conf")
            write_uncommented(self.packaged("/etc/fleetlink/broker.conf"), conf, {
                "listen": "127.0.0.1:0", "control": "127.0.0.1:0", "plain-listen": "127.0.0.1:0",
                "cert": lab.certs.broker_cert, "key": lab.certs.broker_key, "ca": lab.certs.ca,
                "control-token": "unused-when-the-file-is-given", "control-token-file": token,
                "broker-id": "pkg-test", "state-dir": lab.path("broker-state"),
                "artifact-s3-access-key-file": s3_keys["access"],
                "artifact-s3-secret-key-file": s3_keys["secret"]})
            p = lab.process("packaged-broker", [prog, "--config", conf], env=self.env)
            p.wait_log(harness.Broker.READY, timeout=15)
            self.assertEqual(p.stop(timeout=20), 0, p.log()[-3000:])

    def test_agent_conf_is_true_and_passes_check_config(self):
        prog = self.check_config_documents_options("fleetlink-agent", "/etc/fleetlink/agent.conf")
        with harness.Lab(prefix="fleetlink-pkg-lab-") as lab:
            crt, key = lab.certs.rig("rig-pkg")
            plugins = lab.path("plugins")
            os.makedirs(plugins)
            conf = lab.path("agent.conf")
            write_uncommented(self.packaged("/etc/fleetlink/agent.conf"), conf, {
                "broker": "wss://127.0.0.1:9/agent", "rig-id": "rig-pkg",
                "cert": crt, "key": key, "ca": lab.certs.ca,
                "state-dir": lab.path("state"), "plugin-dir": plugins,
                "suites": self.packaged("/etc/fleetlink/suites.json"),
                "reboot-command": "/bin/true"})
            os.makedirs(lab.path("state"))
            out = subprocess.run([prog, "--config", conf, "--check-config"], env=self.env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stdout)
            # And a broken key is reported with the file's name.
            bad = lab.path("bad.conf")
            with open(conf) as f, open(bad, "w") as g:
                g.write(f.read().replace("dmesg-max-lines = ", "dmesg-max-lines = not-a-number #"))
            out = subprocess.run([prog, "--config", bad, "--check-config"], env=self.env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
            self.assertEqual(out.returncode, 2, out.stdout)
            # As is a misspelt key (agent.conf promises it).
            with open(conf) as f, open(bad, "w") as g:
                g.write(f.read() + "dmesg_max_lines = 10\n")
            out = subprocess.run([prog, "--config", bad, "--check-config"], env=self.env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
            self.assertEqual(out.returncode, 2, out.stdout)
            self.assertIn("dmesg_max_lines", out.stdout)

    def test_packaged_lab_ca_issues_a_rig_certificate(self):
        lab_ca = self.packaged("/usr/bin/fleetlink-lab-ca")
        d = os.path.join(tempfile.mkdtemp(dir=self.tmp), "ca")
        run([lab_ca, "init", d], timeout=60)
        run([lab_ca, "rig", d, "rig-0414"], timeout=60)
        shown = run([lab_ca, "show", os.path.join(d, "rig-0414.crt")], timeout=60)
        self.assertIn("rig-0414", shown)


    # ---- what a distribution's archive checks ---------------------------------
    def test_binaries_are_stripped_with_debug_info_in_dbgsym_packages(self):
        self.assertEqual(sorted(self.ddebs), sorted(f"{p}-dbgsym" for p in BINARY_PACKAGES),
                         self.cpack_log[-3000:])
        debug_root = os.path.join(self.tmp, "dbgsym")
        for ddeb in self.ddebs.values():
            run(["dpkg-deb", "-x", ddeb, debug_root])
        elves = [self.library_file()] + [f"/usr/bin/{p}" for p in ("fleetlink-agent", "fleetlink-broker", "fleetctl")]
        for path in elves:
            described = run(["file", "-b", self.packaged(path)])
            self.assertIn(", stripped", described, path)
            build_id = re.search(r"Build ID: ([0-9a-f]+)", run(["readelf", "-n", self.packaged(path)])).group(1)
            debug = os.path.join(debug_root, "usr/lib/debug/.build-id", build_id[:2], build_id[2:] + ".debug")
            self.assertTrue(os.path.isfile(debug), f"no debug info for {path} (build id {build_id})")
            self.assertIn(".debug_info", run(["readelf", "-S", "-W", debug]), debug)

    def test_binaries_are_hardened(self):
        """PIE, full RELRO (BIND_NOW), stack protector and fortified libc calls."""
        for path in [self.library_file()] + [f"/usr/bin/{p}" for p in ("fleetlink-agent", "fleetlink-broker", "fleetctl")]:
            elf = self.packaged(path)
            headers = run(["readelf", "-h", "-l", "-d", "-W", elf])
            self.assertIn("GNU_RELRO", headers, path)
            self.assertRegex(headers, r"\(FLAGS\)\s+.*BIND_NOW|\(FLAGS_1\)\s+.*NOW", path)
            self.assertRegex(headers, r"Type:\s+DYN", path)  # PIE executables are ET_DYN
            if path.startswith("/usr/bin/"):
                self.assertRegex(headers, r"\(FLAGS_1\)\s+.*PIE", path)
            imports = run(["readelf", "--dyn-syms", "-W", elf])
            self.assertIn("__stack_chk_fail", imports, path)
            self.assertRegex(imports, r"__\w+_chk@", f"{path}: no fortified libc call")

    def test_every_program_has_a_man_page(self):
        for pkg, programs in PROGRAMS.items():
            for prog in programs:
                page = f"/usr/share/man/man1/{prog}.1.gz"
                self.assert_has(pkg, page)
                text = run(["sh", "-c", f"gzip -dc '{self.packaged(page)}'"])
                self.assertRegex(text, rf"(?m)^\.TH {re.escape(prog.upper())} \"?1", page)
                self.assertRegex(text, r"\\-\\-[a-z]", page)  # the options are in it

    def test_copyright_and_changelog_in_every_package(self):
        for pkg in PACKAGES:
            copyright_ = self.assert_has(pkg, f"/usr/share/doc/{pkg}/copyright")
            with open(self.packaged(f"/usr/share/doc/{pkg}/copyright")) as f:
                text = f.read()
            self.assertTrue(text.startswith("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"),
                            pkg)
            self.assert_has(pkg, f"/usr/share/doc/{pkg}/changelog.Debian.gz")
            changelog = run(["sh", "-c", f"gzip -dc '{self.packaged(f'/usr/share/doc/{pkg}/changelog.Debian.gz')}'"])
            # The top entry is this package's version.
            self.assertTrue(changelog.startswith(f"fleetlink ({self.fields[pkg]['Version']}) "), changelog[:200])
            self.assertNotIn("localhost", self.fields[pkg]["Maintainer"])
            self.assertRegex(self.fields[pkg]["Maintainer"], r"<[^@>]+@[a-z0-9-]+(\.[a-z0-9-]+)+>")

    def test_lintian_reports_no_error(self):
        """lintian on every .deb and -dbgsym .ddeb: no error; every warning is one
        docs/OPERATIONS.md lists (with its reason)."""
        out = run(["lintian", "--tag-display-limit", "0", "--allow-root",
                   *sorted(self.debs.values()), *sorted(self.ddebs.values())], timeout=280, check=False)
        errors = [l for l in out.splitlines() if l.startswith("E: ")]
        self.assertEqual(errors, [], out)
        with open(OPERATIONS_MD) as f:
            documented = set(re.findall(r"`([a-z0-9][a-z0-9+.%-]+)`", f.read()))
        warnings = sorted({l.split()[2] for l in out.splitlines() if l.startswith("W: ")})
        self.assertEqual([w for w in warnings if w not in documented], [],
                         "lintian warnings not listed in docs/OPERATIONS.md (Packaging):\n" + out)


class RpmSpec(unittest.TestCase):
    """packaging/rpm/fleetlink.spec: its source RPM builds from a tarball of this
    tree, and rpmlint finds no error in the spec or the source RPM. (The binary
    RPMs are built on the RPM distribution itself: docs/OPERATIONS.md.)"""

    @classmethod
    def setUpClass(cls):
        require_tools("rpmbuild", "rpm", "rpmlint", "tar")
        cls.tmp = tempfile.mkdtemp(prefix="fleetlink-rpm-")
        try:
            cls.version = project_version()
            cls.tarball = os.path.join(cls.tmp, f"fleetlink-{cls.version}.tar.gz")
            cls.make_tarball()
            cls.build_log = run(["rpmbuild", "-bs", "--define", f"_topdir {cls.tmp}/top",
                                 "--define", f"_sourcedir {cls.tmp}", SPEC], timeout=120)
            srpms = glob.glob(os.path.join(cls.tmp, "top", "SRPMS", "*.src.rpm"))
            assert len(srpms) == 1, cls.build_log
            cls.srpm = srpms[0]
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def make_tarball(cls):
        """The source tree as a release tarball would hold it: the files git knows
        (tracked and not ignored), under fleetlink-VERSION/."""
        files = None
        if os.path.isdir(os.path.join(SOURCE_DIR, ".git")) or os.path.isfile(os.path.join(SOURCE_DIR, ".git")):
            listed = run(["git", "-C", SOURCE_DIR, "ls-files", "-co", "--exclude-standard", "-z"])
            files = [f for f in listed.split("\0") if f and os.path.isfile(os.path.join(SOURCE_DIR, f))]
        else:
            files = [os.path.relpath(os.path.join(d, f), SOURCE_DIR)
                     for d, dirs, fs in os.walk(SOURCE_DIR)
                     for f in fs if not os.path.relpath(d, SOURCE_DIR).startswith(("build", ".git"))]
        with open(os.path.join(cls.tmp, "files"), "w") as f:
            f.write("\0".join(files))
        run(["tar", "-C", SOURCE_DIR, "--null", "-T", os.path.join(cls.tmp, "files"),
             "--transform", f"s,^,fleetlink-{cls.version}/,", "-czf", cls.tarball])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_cpack_makes_no_rpm(self):
        with open(CPACK_CONFIG) as f:
            generators = re.search(r'set\(CPACK_GENERATOR "([^"]*)"\)', f.read()).group(1)
        self.assertEqual(generators, "DEB")

    def test_source_rpm(self):
        self.assertEqual(run(["rpm", "-qp", "--qf", "%{NAME} %{VERSION}", self.srpm], timeout=60).strip(),
                         f"fleetlink {self.version}")
        contents = run(["rpm", "-qpl", self.srpm], timeout=60).split()
        self.assertEqual(sorted(contents), sorted(["fleetlink.spec", os.path.basename(self.tarball)]))
        listed = run(["tar", "-tzf", self.tarball], timeout=60).split()
        for path in ("CMakeLists.txt", "packaging/rpm/fleetlink.spec", "sdk/fleetlink.pc.in"):
            self.assertIn(f"fleetlink-{self.version}/{path}", listed)

    def test_spec_builds_with_the_distributions_names_and_macros(self):
        with open(SPEC) as f:
            spec = f.read()
        self.assertRegex(spec, rf"(?m)^Version:\s+{re.escape(self.version)}$")
        requires = set(re.findall(r"(?m)^BuildRequires:\s+\(?([A-Za-z0-9_.+-]+)", spec))
        for name in ("cmake", "gcc-c++", "libwebsockets-devel", "libuv-devel", "openssl-devel",
                     "libuuid-devel", "cli11-devel", "json-devel", "hiredis-devel", "sqlite-devel",
                     "doctest-devel", "mimalloc-devel", "libcurl-devel", "msgpack-cxx-devel",
                     "help2man", "systemd-rpm-macros"):
            self.assertIn(name, requires)
        # File lists name directories only through the distribution's macros.
        files = spec[spec.index("%files"):spec.index("%changelog")]
        self.assertNotRegex(files, r"x86_64-linux-gnu|/usr/|/etc/")
        for pkg in ("agent", "broker"):
            for macro in ("systemd_post", "systemd_preun", "systemd_postun_with_restart"):
                self.assertRegex(spec, rf"(?m)^%{macro} fleetlink-{pkg}\.service$")
        for conf in ("agent.conf", "suites.json", "broker.conf"):
            self.assertRegex(spec, rf"%config\(noreplace\) %{{_sysconfdir}}/fleetlink/{re.escape(conf)}\n")
        self.assertIn("%{_libdir}/libfleetlink.so.0", spec)
        self.assertIn("%{_unitdir}/fleetlink-agent.service", spec)

    def test_rpmlint_reports_no_error(self):
        out = run(["rpmlint", "-c", RPMLINT_CONFIG, SPEC, self.srpm], timeout=120, check=False)
        self.assertRegex(out, r"\d+ packages? and \d+ specfiles? checked", out)
        errors = [l for l in out.splitlines() if re.search(r": E: ", l)]
        self.assertEqual(errors, [], out)
        with open(OPERATIONS_MD) as f:
            documented = set(re.findall(r"`([a-z0-9][a-z0-9+.%-]+)`", f.read()))
        warnings = sorted({re.search(r": W: (\S+)", l).group(1) for l in out.splitlines() if ": W: " in l})
        self.assertEqual([w for w in warnings if w not in documented], [],
                         "rpmlint warnings not listed in docs/OPERATIONS.md (Packaging):\n" + out)


if __name__ == "__main__":
    unittest.main()
