#!/usr/bin/python3
"""Seed corpus for fuzz_mesh_codec: mesh notes as encode_note() writes them
(broker/src/redis/mesh_codec.cpp: compact JSON, keys sorted), one of every kind,
and a few that decode_note() must refuse.

usage: make_mesh_corpus.py OUTPUT_DIR
"""
import json
import os
import sys

CMD_ID = "0190f5a2-1c3b-7d4e-8f00-123456789abc"
BOOT_ID = "01937ed9-7200-7000-8000-000000000001"


def note(kind, **fields):
    n = {"v": 1, "kind": kind, "from": "broker-a", "ask": 7, "rig_id": "rig-0414",
         "boot_id": "", "cmd_id": "", "held": False, "cancel": "unknown"}
    n.update(fields)
    return n


COMMAND = {"rig_id": "rig-0414", "kind": "shell", "args": {"cmd": "uname -a", "": "x"},
           "cmd_id": CMD_ID, "key": "client-42", "hold": False, "job_id": "",
           "deliver_within_s": 30, "timeout_s": 600}
OK = {"ok": True, "cmd_id": CMD_ID, "rig_id": "rig-0414", "seq": 12, "state": "queued",
      "existing": False, "held": False, "deliver_by_ms": 1733000030000}
FAILURE = {"ok": False, "error": "rig_unresponsive", "rig_id": "rig-0414",
           "detail": "outbox full (128/128)", "last_ack_seq": 977, "last_ack_at_ms": 1733000000123,
           "suggested_action": "force_reconnect", "cmd_id": ""}
EVENT = {"type": "command_done", "rig_id": "rig-0414", "cmd_id": CMD_ID,
         "detail": "succeeded", "at_ms": 1733000000999}
RIG = {"rig_id": "rig-0414", "boot_id": BOOT_ID, "agent_version": "0.1.0",
       "labels": {"site": "lab-3", "rack": "R12"}, "kinds": ["shell", "suite"],
       "broker_id": "broker-a", "first_seen_ms": 1732000000000, "last_seen_ms": 1733000000000}

SEEDS = {
    "probe": note("probe", boot_id=BOOT_ID),
    "superseded": note("superseded", boot_id=BOOT_ID),
    "command": note("command", command=COMMAND),
    "command_bare": note("command", command={k: v for k, v in COMMAND.items()
                                             if k not in ("deliver_within_s", "timeout_s")}),
    "command_answer_ok": note("command_answer", held=True, outcome=OK),
    "command_answer_failure": note("command_answer", held=True, outcome=FAILURE,
                                   unrecorded="store_unavailable"),
    "cancel": note("cancel", cmd_id=CMD_ID),
    "cancel_answer": note("cancel_answer", cmd_id=CMD_ID, held=True, cancel="requested"),
    "reconnect": note("reconnect"),
    "reconnect_answer": note("reconnect_answer", held=True),
    "event": note("event", event=EVENT),
    "rig_seen": note("rig_seen", rig=RIG),
    # refused
    "bad_kind": note("gossip"),
    "bad_version": note("probe", v=2),
    "bad_ask": note("probe", ask=-1),
    "event_missing": note("event"),
}


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name, n in SEEDS.items():
        with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as out:
            out.write(json.dumps(n, separators=(",", ":"), sort_keys=True, ensure_ascii=False))
    with open(os.path.join(out_dir, "not_an_object.json"), "w", encoding="ascii") as out:
        out.write("[[[[1,2.5e3,\"\\u00e9\",null,true]]]]")
    print("wrote %d seeds to %s" % (len(SEEDS) + 1, out_dir))


if __name__ == "__main__":
    main()
