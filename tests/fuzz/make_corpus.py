#!/usr/bin/python3
"""Seed corpus for fuzz_codec: one file per test vector (valid and invalid).

usage: make_corpus.py tests/vectors/frames.txt OUTPUT_DIR
"""
import os
import sys


def main():
    vectors, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    count = 0
    with open(vectors, encoding="ascii") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            name, _, hexdata = line.split("\t")
            safe = name.replace("/", "__")
            with open(os.path.join(out_dir, safe), "wb") as out:
                out.write(bytes.fromhex(hexdata))
            count += 1
    print("wrote %d seeds to %s" % (count, out_dir))


if __name__ == "__main__":
    main()
