#!/usr/bin/python3
"""Seed corpora for fuzz_fleet_hello and fuzz_control (tests/fuzz/).

usage: make_broker_corpus.py tests/vectors/frames.txt OUTPUT_DIR
writes OUTPUT_DIR/hello/* (a flags byte, then frames as u16-length-prefixed
messages: the protocol vectors in the orders a rig sends them, and each refused
vector as a first frame) and OUTPUT_DIR/control/* (a target byte, a query line,
a body: the documented request bodies of docs/OPERATIONS.md).
"""
import os
import struct
import sys

TICK = b"\xff\xff"  # five seconds pass, the sweep runs

COLLIDE, TLS_SAME, TLS_OTHER, FRAGMENT, DRAINING = 1, 2, 4, 8, 16


def read_vectors(path):
    vectors = {}
    with open(path, encoding="ascii") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            name, validity, hexdata = line.split("\t")
            vectors[name] = (validity, bytes.fromhex(hexdata))
    return vectors


def session(flags, *frames):
    out = bytes([flags])
    for frame in frames:
        out += TICK if frame is TICK else struct.pack("<H", len(frame)) + frame
    return out


def hello_seeds(v):
    f = {name: data for name, (_, data) in v.items()}
    hello, full = f["hello_minimal"], f["hello_full"]
    seeds = {
        "hello": session(0, hello),
        "hello_full": session(0, full),
        "conversation": session(0, hello, f["ack"], f["output_chunk"], f["result_ok"], f["event"]),
        "conversation_fragmented": session(FRAGMENT, full, f["ack"], f["output_chunk"], f["result_ok"]),
        "nack": session(0, hello, f["nack_seq_gap"]),
        "nack_kind": session(0, hello, f["nack_unsupported_kind"]),
        "duplicate_ack": session(0, hello, f["ack_duplicate"], f["result_duplicate_forgotten"]),
        "collision": session(COLLIDE, hello, TICK, TICK),
        "tls_same": session(TLS_SAME, hello),
        "tls_other": session(TLS_OTHER, hello),
        "draining": session(DRAINING, hello, f["ack"]),
        "silent_rig": session(0, hello, TICK, TICK, TICK, TICK, TICK, TICK, TICK),
        "no_hello": session(0, TICK, TICK),
        "ack_first": session(0, f["ack"]),
        "hello_twice": session(0, hello, hello),
        "broker_frame_from_rig": session(0, hello, f["welcome"], f["command_dmesg"], f["goaway"]),
    }
    for name, (validity, data) in v.items():
        if validity == "invalid":
            seeds["first_" + name.replace("/", "__")] = session(0, data)
            seeds["after_hello_" + name.replace("/", "__")] = session(0, hello, data)
    return seeds


RIG_COMMANDS, RIG_OFFLINE, COMMANDS, JOBS, DRAIN, CANCEL, LIST_COMMANDS, LIST_JOBS, EVENTS, RIGS, \
    RECONNECT, STREAM = range(12)
CMD = "01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e"
JOB = ('{"kind":"suite","args":{"suite":"7"},"targets":{"ids":["rig-0414","rig-0415"],"glob":"rig-04*",'
       '"labels":{"lab":"b2"}},"max_concurrency":5,"max_errors":"10%","deadline_s":7200}')


def control_seeds():
    def req(target, query, body):
        return bytes([target]) + query.encode() + b"\n" + body.encode()
    return {
        "command": req(RIG_COMMANDS, "", '{"kind":"dmesg","args":{"lines":"50"}}'),
        "command_every_field": req(RIG_COMMANDS, "wait=acked&timeout_ms=100",
                                   '{"kind":"reboot","args":{"a":1,"b":true},"cmd_id":"%s","idempotency_key":"k1",'
                                   '"deliver_within_s":5,"timeout_s":9,"hold":true}' % CMD),
        "command_wait_done": req(RIG_COMMANDS, "wait=done", '{"kind":"dmesg"}'),
        "command_offline_hold": req(RIG_OFFLINE, "", '{"kind":"dmesg","hold":true,"deliver_within_s":60}'),
        "commands_job": req(COMMANDS, "", JOB),
        "job": req(JOBS, "", JOB),
        "job_dry_run": req(JOBS, "dry_run=true", JOB),
        "job_shares": req(JOBS, "", '{"kind":"dmesg","targets":{"glob":"*"},"max_concurrency":"50%",'
                                    '"max_errors":1,"hold":true,"timeout_s":3}'),
        "drain": req(DRAIN, "", '{"window_ms":30000}'),
        "drain_default": req(DRAIN, "", ""),
        "cancel": req(CANCEL, "", ""),
        "list_commands": req(LIST_COMMANDS, "rig=rig-0414&state=queued&limit=10&since=1&before=2", ""),
        "list_jobs": req(LIST_JOBS, "state=running&limit=5&rigs=false", ""),
        "events": req(EVENTS, "types=command_acked,rig_connected&cmd=%s&rig=rig-0414" % CMD, ""),
        "rigs": req(RIGS, "label=lab%3Db2&state=connected", ""),
        "reconnect": req(RECONNECT, "", ""),
        "stream_send": req(STREAM, "", '{"op":"send","ref":"r1","rig_id":"rig-0414","kind":"dmesg",'
                                       '"args":{"lines":"50"},"notify":"output","deliver_within_s":5}'),
        "stream_bad": req(STREAM, "", '{"ref":"a","op":"launch"}'),
    }


def main():
    vectors, out_dir = sys.argv[1], sys.argv[2]
    for sub, seeds in (("hello", hello_seeds(read_vectors(vectors))), ("control", control_seeds())):
        os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(out_dir, sub, name), "wb") as out:
                out.write(data)
        print("wrote %d seeds to %s" % (len(seeds), os.path.join(out_dir, sub)))


if __name__ == "__main__":
    main()
