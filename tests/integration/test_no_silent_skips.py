"""No test skips silently (issue 16 point 6).

CTest runs each integration module through run_module.py; here it runs small
modules written by the test: one whose tests pass, and modules that skip in each
way unittest knows (decorator, skipTest, SkipTest raised in setUpClass). A skip
must fail the module and be listed with its reason; a failure stays a failure.
"""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "run_module.py")

MODULES = {
    "mod_passes": """
        import unittest
        class T(unittest.TestCase):
            def test_a(self): self.assertEqual(1, 1)
        """,
    "mod_decorator_skip": """
        import unittest
        class T(unittest.TestCase):
            def test_a(self): pass
            @unittest.skipUnless(False, "the tool is missing")
            def test_b(self): pass
        """,
    "mod_skiptest": """
        import unittest
        class T(unittest.TestCase):
            def test_a(self): self.skipTest("not built here")
        """,
    "mod_class_skip": """
        import unittest
        class T(unittest.TestCase):
            @classmethod
            def setUpClass(cls): raise unittest.SkipTest("no root")
            def test_a(self): pass
        """,
    "mod_fails": """
        import unittest
        class T(unittest.TestCase):
            def test_a(self): self.assertEqual(1, 2)
        """,
}


class RunModule(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="fleetlink-skips-")
        for name, text in MODULES.items():
            with open(os.path.join(cls.tmp.name, name + ".py"), "w") as f:
                f.write(textwrap.dedent(text))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_module(self, name):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        return subprocess.run([sys.executable, RUNNER, name], cwd=self.tmp.name, env=env,
                              capture_output=True, text=True, timeout=60)

    def test_a_passing_module_passes(self):
        r = self.run_module("mod_passes")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("test_a", r.stderr)
        self.assertNotIn("SKIPPED", r.stderr)

    def test_every_kind_of_skip_fails_the_module_with_its_reason(self):
        for name, reason in (("mod_decorator_skip", "the tool is missing"),
                             ("mod_skiptest", "not built here"),
                             ("mod_class_skip", "no root")):
            with self.subTest(name):
                r = self.run_module(name)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertRegex(r.stderr, rf"SKIPPED .+: {reason}")
                self.assertIn("counts as a failure", r.stderr)

    def test_a_failure_is_still_a_failure(self):
        r = self.run_module("mod_fails")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("FAILED", r.stderr)


if __name__ == "__main__":
    unittest.main()
