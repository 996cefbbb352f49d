"""Runs one integration test module for CTest (tests/integration/CMakeLists.txt):
`python3 run_module.py test_x` is `python3 -m unittest -v test_x`, except that a
test that skipped makes the run fail.

unittest reports a skipped test as "ok (skipped)" and exits 0, so CTest would
count it as passed: a test that could not run (a program not built, a tool
missing, not root) would look like a test that ran and held. Here every skip is
listed with its reason at the end and the module fails. Write a test that cannot
run as a failure that says why; this runner catches the skips nobody meant to
keep (unittest.skip*, skipTest, SkipTest raised in a setUp).
"""
import os
import sys
import unittest


def main(argv):
    if len(argv) != 2:
        print("usage: run_module.py TEST_MODULE", file=sys.stderr)
        return 2
    sys.path.insert(0, os.getcwd())  # as `python3 -m unittest`: modules from the working directory
    suite = unittest.defaultTestLoader.loadTestsFromName(argv[1])
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stderr).run(suite)
    if result.skipped:
        print(f"\n{argv[1]}: {len(result.skipped)} test(s) SKIPPED, which counts as a failure "
              "(a test that cannot run must fail and say why):", file=sys.stderr)
        for test, reason in result.skipped:
            print(f"  SKIPPED {test.id()}: {reason}", file=sys.stderr)
    return 0 if result.wasSuccessful() and not result.skipped else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
