#!/usr/bin/python3
"""Writes tests/vectors/frames.txt: fleetlink protocol test vectors.

The frames are built here with python3-msgpack, independently of the C++ codec,
following the deterministic encoding rules of docs/PROTOCOL.md section 2 (keys v, t,
then the fields in documented order, every field present, smallest integer forms,
str for text, bin for bytes, string maps sorted by key). The C++ unit test
(tests/unit/sdk/vectors_test.cpp) must decode every valid frame and re-encode it to
the same bytes, so the two implementations check each other.

Line format: name<TAB>valid|invalid<TAB>hex. For invalid frames the name is
"<expected fleetlink::Errc>/<what is wrong>".

Run: /usr/bin/python3 tests/vectors/generate_frames.py > tests/vectors/frames.txt
"""
import sys

import msgpack

CMD = "01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e"
BOOT = "01936d3c-0000-7000-8000-000000000001"
SESSION = "01936d3c-0000-7000-8000-000000000002"
SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
SHA_EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def frame(t, fields):
    """A frame in the canonical form: v, t, then fields in the given order."""
    m = {"v": 1, "t": t}
    for k, v in fields:
        if isinstance(v, dict):
            v = dict(sorted(v.items(), key=lambda kv: kv[0].encode()))
        m[k] = v
    return msgpack.packb(m, use_bin_type=True)


def hello(rig="rig-0414", version="0.1.0", boot=BOOT, labels=None, kinds=None):
    return [("rig_id", rig), ("agent_version", version), ("boot_id", boot),
            ("labels", {} if labels is None else labels),
            ("kinds", [] if kinds is None else kinds)]


def result(**kw):
    f = dict(cmd_id=CMD, status="ok", exit_code=0, signal=0, output=b"", truncated=False,
             dropped_bytes=0, started_at_ms=0, finished_at_ms=0, detail="", interrupted=False,
             artifacts=[])
    f.update(kw)
    order = ["cmd_id", "status", "exit_code", "signal", "output", "truncated",
             "dropped_bytes", "started_at_ms", "finished_at_ms", "detail", "interrupted", "artifacts"]
    return [(k, f[k]) for k in order]


VALID = [
    ("hello_minimal", frame("hello", hello())),
    ("hello_full", frame("hello", hello(labels={"soc": "x86_64", "lab": "b2", "room": "Grüße"},
                                        kinds=["dmesg", "reboot", "suite", "my.plugin-2"]))),
    ("welcome", frame("welcome", [("broker_id", "broker-1.lab.example"), ("session_id", SESSION),
                                  ("ping_interval_ms", 20000), ("max_frame_bytes", 131072)])),
    ("command_dmesg", frame("command", [("seq", 1), ("cmd_id", CMD), ("kind", "dmesg"),
                                        ("args", {"lines": "50"}),
                                        ("issued_at_ms", 1764448306123)])),
    ("command_large_seq", frame("command", [("seq", 2**64 - 1), ("cmd_id", CMD),
                                            ("kind", "suite"), ("args", {"id": "7", "b": ""}),
                                            ("issued_at_ms", 0)])),
    ("ack", frame("ack", [("seq", 1), ("cmd_id", CMD), ("duplicate", False)])),
    ("ack_duplicate", frame("ack", [("seq", 300), ("cmd_id", CMD), ("duplicate", True)])),
    ("nack_seq_gap", frame("nack", [("seq", 7), ("cmd_id", CMD), ("reason", "seq_gap"),
                                    ("detail", "expected seq 5"), ("expected_seq", 5)])),
    ("nack_undecodable", frame("nack", [("seq", 0), ("cmd_id", ""), ("reason", "malformed"),
                                        ("detail", "bad frame"), ("expected_seq", 0)])),
    ("nack_unsupported_kind", frame("nack", [("seq", 2), ("cmd_id", CMD),
                                             ("reason", "unsupported_kind"), ("detail", ""),
                                             ("expected_seq", 0)])),
    ("result_ok", frame("result", result(output=b"[    0.000000] Linux version 6.1\n",
                                         started_at_ms=1764448306123,
                                         finished_at_ms=1764448306200))),
    ("result_failed_signal", frame("result", result(status="failed", exit_code=-1, signal=9,
                                                    output=bytes(range(256)), truncated=True,
                                                    dropped_bytes=70000,
                                                    detail="killed by signal 9"))),
    ("result_negative_exit", frame("result", result(status="timeout", exit_code=-2147483648))),
    ("result_scheduled", frame("result", result(status="scheduled"))),
    ("result_interrupted", frame("result", result(
        status="failed", finished_at_ms=1764448306200, interrupted=True,
        detail="interrupted: accepted by an earlier agent process (boot_id " + BOOT +
               ") that ended before it finished"))),
    ("result_duplicate_forgotten", frame("result", result(
        status="duplicate", detail="already ran on this rig; its result is no longer kept"))),
    ("result_artifacts", frame("result", result(
        status="failed", exit_code=1, finished_at_ms=1764448306200,
        artifacts=[{"name": "output.log", "size": 104857600, "sha256": SHA},
                   {"name": "junit.xml", "size": 0, "sha256": SHA_EMPTY}]))),
    ("output_chunk", frame("output", [("cmd_id", CMD), ("offset", 65536),
                                      ("data", b"line one\nline two\n")])),
    ("output_chunk_max", frame("output", [("cmd_id", CMD), ("offset", 0),
                                          ("data", b"x" * 16384)])),
    ("event", frame("event", [("name", "disk_low"), ("fields", {"free_mb": "12", "dev": "sda"}),
                              ("at_ms", 1764448306123)])),
    ("cancel", frame("cancel", [("cmd_id", CMD)])),
    ("goaway", frame("goaway", [("reason", "drain"), ("reconnect_after_ms", 7500)])),
    ("goaway_empty", frame("goaway", [("reason", ""), ("reconnect_after_ms", 0)])),
]

cancel_ok = frame("cancel", [("cmd_id", CMD)])
hello_ok = frame("hello", hello())


def raw_map(pairs):
    """A map with pairs in exactly this order (also duplicates, non-str keys)."""
    out = bytearray([0x80 | len(pairs)])
    for k, v in pairs:
        out += msgpack.packb(k, use_bin_type=True) + msgpack.packb(v, use_bin_type=True)
    return bytes(out)


INVALID = [
    ("truncated/empty", b""),
    ("truncated/hello_cut_in_half", hello_ok[: len(hello_ok) // 2]),
    ("truncated/cancel_missing_last_byte", cancel_ok[:-1]),
    ("truncated/map_header_only", b"\x84"),
    ("malformed/never_used_byte_c1", b"\xc1"),
    ("malformed/array_not_map", msgpack.packb([1, "cancel"])),
    ("malformed/string_not_map", msgpack.packb("hello")),
    ("malformed/trailing_bytes", cancel_ok + b"\xc0"),
    ("malformed/two_maps", cancel_ok + cancel_ok),
    ("malformed/duplicate_key", raw_map([("v", 1), ("t", "cancel"), ("cmd_id", CMD),
                                         ("cmd_id", CMD)])),
    ("malformed/integer_key", raw_map([("v", 1), ("t", "cancel"), ("cmd_id", CMD), (7, 7)])),
    ("missing_field/no_version", raw_map([("t", "cancel"), ("cmd_id", CMD)])),
    ("missing_field/no_type", raw_map([("v", 1), ("cmd_id", CMD)])),
    ("missing_field/cancel_without_cmd_id", raw_map([("v", 1), ("t", "cancel")])),
    ("missing_field/command_without_seq", raw_map([("v", 1), ("t", "command"), ("cmd_id", CMD),
                                                   ("kind", "dmesg")])),
    ("missing_field/hello_without_boot_id", raw_map([("v", 1), ("t", "hello"),
                                                     ("rig_id", "rig-1"),
                                                     ("agent_version", "1")])),
    ("unsupported_version/v2", raw_map([("v", 2), ("t", "cancel"), ("cmd_id", CMD)])),
    ("unsupported_version/v0", raw_map([("v", 0), ("t", "cancel"), ("cmd_id", CMD)])),
    ("bad_field/version_as_string", raw_map([("v", "1"), ("t", "cancel"), ("cmd_id", CMD)])),
    ("bad_field/type_as_int", raw_map([("v", 1), ("t", 8), ("cmd_id", CMD)])),
    ("unknown_type/teleport", raw_map([("v", 1), ("t", "teleport"), ("cmd_id", CMD)])),
    ("bad_field/seq_as_string", raw_map([("v", 1), ("t", "ack"), ("seq", "1"), ("cmd_id", CMD),
                                         ("duplicate", False)])),
    ("bad_field/seq_negative", raw_map([("v", 1), ("t", "ack"), ("seq", -1), ("cmd_id", CMD),
                                        ("duplicate", False)])),
    ("bad_field/seq_zero", raw_map([("v", 1), ("t", "ack"), ("seq", 0), ("cmd_id", CMD),
                                    ("duplicate", False)])),
    ("bad_field/duplicate_as_int", raw_map([("v", 1), ("t", "ack"), ("seq", 1), ("cmd_id", CMD),
                                            ("duplicate", 1)])),
    ("bad_field/cmd_id_not_uuid", raw_map([("v", 1), ("t", "cancel"), ("cmd_id", "42")])),
    ("bad_field/rig_id_with_space", frame("hello", hello(rig="rig 1"))),
    ("bad_field/boot_id_uuid_v4", frame("hello", hello(boot="6f1c1a52-1b0e-4d4e-9a6c-0e1a2b3c4d5e"))),
    ("bad_field/label_not_utf8", bytes([0x86]) + b"".join(
        msgpack.packb(x) for x in ["v", 1, "t", "hello", "rig_id", "r", "agent_version", "1",
                                   "boot_id", BOOT, "labels"]) + b"\x81\xa1k\xa2\xff\xfe"),
    ("bad_field/status_unknown", frame("result", result(status="exploded"))),
    ("bad_field/output_as_str", frame("result", result(output="text, not bin"))),
    ("bad_field/exit_code_over_int32", frame("result", result(exit_code=2**31))),
    ("bad_field/interrupted_as_int", frame("result", result(interrupted=1))),
    ("bad_field/interrupted_as_str", frame("result", result(interrupted="true"))),
    ("bad_field/interrupted_as_nil", frame("result", result(interrupted=None))),
    ("bad_field/artifact_name_with_slash", frame("result", result(
        artifacts=[{"name": "../etc/passwd", "size": 1, "sha256": SHA}]))),
    ("bad_field/artifact_name_hidden", frame("result", result(
        artifacts=[{"name": ".bashrc", "size": 1, "sha256": SHA}]))),
    ("bad_field/artifact_sha_upper_case", frame("result", result(
        artifacts=[{"name": "a.log", "size": 1, "sha256": SHA.upper()}]))),
    ("bad_field/artifact_extra_key", frame("result", result(
        artifacts=[{"name": "a.log", "size": 1, "sha256": SHA, "url": "x"}]))),
    ("bad_field/artifact_size_negative", frame("result", result(
        artifacts=[{"name": "a.log", "size": -1, "sha256": SHA}]))),
    ("bad_field/artifact_name_twice", frame("result", result(
        artifacts=[{"name": "a.log", "size": 1, "sha256": SHA}, {"name": "a.log", "size": 2, "sha256": SHA}]))),
    ("too_large/65_artifacts", frame("result", result(
        artifacts=[{"name": "a%d" % i, "size": 1, "sha256": SHA} for i in range(65)]))),
    ("bad_field/ping_interval_over_uint32", frame("welcome", [("broker_id", "b"),
                                                              ("session_id", SESSION),
                                                              ("ping_interval_ms", 2**32),
                                                              ("max_frame_bytes", 0)])),
    ("bad_field/args_value_not_str", raw_map([("v", 1), ("t", "command"), ("seq", 1),
                                              ("cmd_id", CMD), ("kind", "dmesg"),
                                              ("args", {"lines": 50})])),
    ("too_large/rig_id_65_chars", frame("hello", hello(rig="r" * 65))),
    ("too_large/33_kinds", frame("hello", hello(kinds=["k%d" % i for i in range(33)]))),
    ("too_large/65_labels", frame("hello", hello(labels={"k%02d" % i: "v" for i in range(65)}))),
    ("too_large/label_value_257_bytes", frame("hello", hello(labels={"lab": "x" * 257}))),
    ("too_large/chunk_16385_bytes", frame("output", [("cmd_id", CMD), ("offset", 0),
                                                     ("data", b"x" * 16385)])),
    ("truncated/str32_claims_4GiB", b"\x81\xa1v\xdb\xff\xff\xff\xff"),
    ("too_large/map32_claims_4G_entries", b"\xdf\xff\xff\xff\xff"),
    ("too_large/array_nesting_bomb", b"\x81\xa1x" + b"\x91" * 1000 + b"\xc0"),
]


def main():
    out = sys.stdout
    out.write("# fleetlink protocol v1 test vectors; see docs/PROTOCOL.md section 9.\n")
    out.write("# Generated by tests/vectors/generate_frames.py; name<TAB>valid|invalid<TAB>hex\n")
    names = set()
    for kind, rows in (("valid", VALID), ("invalid", INVALID)):
        for name, data in rows:
            assert name not in names, name
            names.add(name)
            out.write("%s\t%s\t%s\n" % (name, kind, data.hex()))


if __name__ == "__main__":
    main()
