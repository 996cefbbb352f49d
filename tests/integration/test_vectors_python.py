"""The protocol test vectors read by an independent msgpack implementation.

tests/vectors/frames.txt is checked byte for byte against the C++ codec by the unit
tests; here python3-msgpack (a third-party decoder) must read every valid frame as one
map whose first keys are v and t and whose fields are exactly those docs/PROTOCOL.md
lists for the type, in that order. Invalid frames must not all be readable as such.
"""
import os
import re
import unittest

import msgpack

import broker_rawclient

SOURCE_DIR = os.environ.get(
    "FLEETLINK_SOURCE_DIR",
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VECTORS = os.path.join(SOURCE_DIR, "tests", "vectors", "frames.txt")
PROTOCOL = os.path.join(SOURCE_DIR, "docs", "PROTOCOL.md")
MESSAGES_HPP = os.path.join(SOURCE_DIR, "sdk", "include", "fleetlink", "messages.hpp")

# (field, python type) in wire order, as in docs/PROTOCOL.md section 3.
FIELDS = {
    "hello": [("rig_id", str), ("agent_version", str), ("boot_id", str), ("labels", dict),
              ("kinds", list)],
    "welcome": [("broker_id", str), ("session_id", str), ("ping_interval_ms", int),
                ("max_frame_bytes", int)],
    "command": [("seq", int), ("cmd_id", str), ("kind", str), ("args", dict),
                ("issued_at_ms", int)],
    "ack": [("seq", int), ("cmd_id", str), ("duplicate", bool)],
    "nack": [("seq", int), ("cmd_id", str), ("reason", str), ("detail", str),
             ("expected_seq", int)],
    "result": [("cmd_id", str), ("status", str), ("exit_code", int), ("signal", int),
               ("output", bytes), ("truncated", bool), ("dropped_bytes", int),
               ("started_at_ms", int), ("finished_at_ms", int), ("detail", str),
               ("interrupted", bool), ("artifacts", list)],
    "output": [("cmd_id", str), ("offset", int), ("data", bytes)],
    "event": [("name", str), ("fields", dict), ("at_ms", int)],
    "cancel": [("cmd_id", str)],
    "goaway": [("reason", str), ("reconnect_after_ms", int)],
}


def load_vectors():
    vectors = []
    with open(VECTORS, encoding="ascii") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            name, kind, hexdata = line.split("\t")
            vectors.append((name, kind, bytes.fromhex(hexdata)))
    return vectors


def strict_unpack(data):
    """One msgpack object from data; raises if bytes are left over."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


class VectorsWithPythonMsgpack(unittest.TestCase):
    def setUp(self):
        self.vectors = load_vectors()

    def test_valid_frames_read_with_third_party_decoder(self):
        seen_types = set()
        for name, kind, data in self.vectors:
            if kind != "valid":
                continue
            with self.subTest(vector=name):
                obj = strict_unpack(data)
                self.assertIsInstance(obj, dict)
                keys = list(obj.keys())
                self.assertEqual(keys[:2], ["v", "t"])
                self.assertEqual(obj["v"], 1)
                self.assertIn(obj["t"], FIELDS)
                seen_types.add(obj["t"])
                expected = FIELDS[obj["t"]]
                self.assertEqual(keys[2:], [f for f, _ in expected])
                for field, typ in expected:
                    value = obj[field]
                    if typ is int:
                        self.assertTrue(isinstance(value, int) and not isinstance(value, bool),
                                        field)
                    else:
                        self.assertIsInstance(value, typ, field)
                    if typ is dict:
                        for k, v in value.items():
                            self.assertIsInstance(k, str)
                            self.assertIsInstance(v, str)
                        # string maps are sorted by key bytes (deterministic encoding)
                        self.assertEqual(list(value.keys()),
                                         sorted(value.keys(), key=lambda s: s.encode()))
                # Re-packing with python-msgpack gives the same bytes: the encoding is
                # the canonical smallest form.
                self.assertEqual(msgpack.packb(obj, use_bin_type=True), data)
        self.assertEqual(seen_types, set(FIELDS))

    def test_invalid_frames_are_named_by_error(self):
        errcs = {"truncated", "malformed", "missing_field", "bad_field", "unknown_type",
                 "unsupported_version", "too_large"}
        invalid = [v for v in self.vectors if v[1] == "invalid"]
        self.assertGreaterEqual(len(invalid), 10)
        for name, _, data in invalid:
            self.assertIn(name.split("/")[0], errcs, name)
            if name.startswith(("truncated/", "malformed/never_used", "malformed/trailing",
                                "malformed/two_maps")):
                with self.subTest(vector=name):
                    with self.assertRaises(Exception):
                        strict_unpack(data)

    def test_protocol_doc_lists_every_field(self):
        with open(PROTOCOL, encoding="utf-8") as f:
            doc = f.read()
        for t, fields in FIELDS.items():
            self.assertIn("`%s`" % t, doc)
            for field, _ in fields:
                self.assertIn("| `%s` |" % field, doc, "%s.%s" % (t, field))

    def test_the_tests_subprotocol_is_the_sdks_and_the_docs(self):
        with open(MESSAGES_HPP, encoding="utf-8") as f:
            m = re.search(r'kSubprotocol = "([^"]+)"', f.read())
        self.assertIsNotNone(m, "kSubprotocol not found in messages.hpp")
        self.assertEqual(broker_rawclient.SUBPROTOCOL, m.group(1))
        with open(PROTOCOL, encoding="utf-8") as f:
            self.assertIn("`%s`" % m.group(1), f.read())


if __name__ == "__main__":
    unittest.main()
