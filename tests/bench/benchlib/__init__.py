"""Helpers of tests/bench/run: processes (broker, rigsim, benchctl), machine facts."""
