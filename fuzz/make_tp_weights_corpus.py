#!/usr/bin/env python3
"""Seeds of fuzz/wire_tp_weights_fuzz (wire/tp_weights.h): an offer (96 bytes),
the answer, next and reply words, then the chunks of the fuzzer's two tensors
(64 and 6 elements) as a rank receives them, each tensor one unencoded chunk:
a 32-byte layer chunk header (dtype code, flags, group size, tensor index,
original bytes, stored bytes, offset), then the payload zero-padded to a
multiple of 4.  Usage: fuzz/make_tp_weights_corpus.py fuzz/corpus"""
import os
import struct
import sys

F32, F16, BF16 = 1, 2, 3  # wire dtype codes (src/wire/encoding.h kWireDTypes)


def offer(ranks=2, begin=0, end=2, shipping=1, config_bytes=300, element_bytes=4):
    digest = b"0123456789abcdef" * 4
    return struct.pack("<8I", 0x31575054, ranks, begin, end, shipping, config_bytes, element_bytes, 0) + digest


def words(answer=1, next_rank=1, reply=0):
    return struct.pack("<3I", answer, next_rank, reply)


def tensor(index, elements, code, size):
    data = bytes((i * 7) & 0xFF for i in range(elements * size))
    header = struct.pack("<BBHIQQQ", code, 0, 0, index, len(data), len(data), 0)
    return header + data + b"\0" * (-len(data) % 4)


SEEDS = {
    "f32_shard": offer() + words() + tensor(0, 64, F32, 4) + tensor(1, 6, F32, 4),
    "bf16_shard": offer(element_bytes=2) + words() + tensor(0, 64, BF16, 2) + tensor(1, 6, BF16, 2),
    "f16_in_f32_offer": offer(ranks=4, begin=1, end=3) + words(0, 3, 0) + tensor(0, 64, F16, 2) + tensor(1, 6, F16, 2),
    "not_shipping": offer(shipping=0, config_bytes=0, element_bytes=0) + words(0, 0, 2),
    "another_checkpoint": offer(shipping=0, config_bytes=0, element_bytes=0) + words(2, 0, 0),
}

root = os.path.join(sys.argv[1], "wire_tp_weights_fuzz")
os.makedirs(root, exist_ok=True)
for name, data in SEEDS.items():
    with open(os.path.join(root, name), "wb") as f:
        f.write(data)
