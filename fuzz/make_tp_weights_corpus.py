#!/usr/bin/env python3
"""Seeds of fuzz/wire_tp_weights_fuzz (wire/tp_weights.h): an offer (96 bytes),
the answer, next and reply words, then the chunks of the fuzzer's two tensors
(64 and 6 elements) as a rank receives them, each tensor one unencoded chunk
(with block_tensors in the offer, its dtype codes first, one byte a tensor,
padded: a block type's tensor i is i + 1 rows of one block, as u8 bytes):
a 32-byte layer chunk header (dtype code, flags, group size, tensor index,
original bytes, stored bytes, offset), then the payload zero-padded to a
multiple of 4.  Usage: fuzz/make_tp_weights_corpus.py fuzz/corpus"""
import os
import struct
import sys

F32, F16, BF16, U8 = 1, 2, 3, 6  # wire dtype codes (src/wire/encoding.h kWireDTypes)
Q8_0, Q4_K, Q6_K = 1, 3, 5  # block codes (src/wire/tp_weights.h kTpBlockCodes)


def offer(ranks=2, begin=0, end=2, shipping=1, config_bytes=300, element_bytes=4, block_tensors=0):
    digest = b"0123456789abcdef" * 4
    fields = (0x31575054, ranks, begin, end, shipping, config_bytes, element_bytes, block_tensors)
    return struct.pack("<8I", *fields) + digest


def dtypes(*codes):
    return bytes(codes) + b"\0" * (-len(codes) % 4)


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
    # a Q4_K_M layer's mix: q4_k blocks (1 row of 256, 144 bytes) and an f32 tensor; q8_0 and q6_k rows
    "q4_k_blocks": offer(block_tensors=2) + words() + dtypes(Q4_K, 0) + tensor(0, 144, U8, 1) + tensor(1, 6, F32, 4),
    "q8_0_q6_k_blocks": offer(block_tensors=3) + words() + dtypes(Q8_0, Q6_K, 0) + tensor(0, 34, U8, 1)
    + tensor(1, 420, U8, 1),
}

root = os.path.join(sys.argv[1], "wire_tp_weights_fuzz")
os.makedirs(root, exist_ok=True)
for name, data in SEEDS.items():
    with open(os.path.join(root, name), "wb") as f:
        f.write(data)
