#!/usr/bin/env python3
"""Seeds of fuzz/wire_tp_step_fuzz (wire/tp_step.h): valid steps and a stop,
little-endian u32 words, under the fuzzer's limits (64 positions, 16 blocks of
4, vocabulary 100; hidden size 8 for a step of hidden states, which carries
no ids).  Usage: fuzz/make_tp_step_corpus.py fuzz/corpus"""
import os
import struct
import sys


def step(ids, parts, copies=(), all_logits=0, hidden=0):
    blocks = sum(len(p[2]) for p in parts)
    tokens = sum(p[0] for p in parts)
    words = [0x31535054, 1, tokens, len(parts), blocks, len(copies), all_logits, hidden]
    words += ids
    for tokens, pos0, table in parts:
        words += [tokens, pos0, len(table)]
    for _, _, table in parts:
        words += table
    for a, b in copies:
        words += [a, b]
    return struct.pack("<%dI" % len(words), *words)


SEEDS = {
    "stop": struct.pack("<8I", 0x31535054, 2, 0, 0, 0, 0, 0, 0),
    "decode_one": step([7], [(1, 5, [3, 9])]),
    "prefill_all_logits": step([1, 2, 3, 4, 5], [(5, 0, [0, 1])], all_logits=1),
    "batch_with_copy": step([1, 2, 3, 99], [(3, 0, [5]), (1, 6, [7, 2])], copies=[(1, 2)]),
    "hidden_batch": step([], [(3, 0, [5]), (1, 6, [7, 2])], copies=[(1, 2)], hidden=1),
}

root = os.path.join(sys.argv[1], "wire_tp_step_fuzz")
os.makedirs(root, exist_ok=True)
for name, data in SEEDS.items():
    with open(os.path.join(root, name), "wb") as f:
        f.write(data)
