#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/safetensors_fuzz.cpp: a few small, valid
safetensors files laid out as the reference writer does (u64 LE header length,
JSON header padded with spaces to a multiple of 8, then the data section).
Pure Python (struct + json). Run from anywhere; it rewrites
fuzz/corpus/safetensors_fuzz/ beside this script."""

import json
import os
import struct

SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1}
# tessera's own names of ggml's blocks (a stage's shipped GGUF blocks): (elements, bytes) a block.
BLOCKS = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210)}


def encode(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, data bytes), laid out in order."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, data in tensors:
        numel = 1
        for d in shape:
            numel *= d
        if dtype in BLOCKS:
            elements, block_bytes = BLOCKS[dtype]
            assert shape and shape[-1] % elements == 0 and len(data) == numel // elements * block_bytes, name
        else:
            assert len(data) == numel * SIZES[dtype], name
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors_fuzz")
    os.makedirs(out, exist_ok=True)
    seeds = {
        "empty.safetensors": encode([]),
        "one_f32.safetensors": encode([("w", "F32", [2, 3], struct.pack("<6f", 1, -2, 3.5, 0, 1e-3, 7))]),
        "mixed_dtypes.safetensors": encode(
            [
                ("model.embed_tokens.weight", "BF16", [4, 2], struct.pack("<8H", *range(0x3F80, 0x3F88))),
                ("model.norm.weight", "F16", [2], struct.pack("<2H", 0x3C00, 0x7BFF)),
                ("ids", "I64", [2], struct.pack("<2q", -1, 1 << 40)),
                ("mask", "U8", [3], bytes([0, 1, 255])),
                ("pos", "I32", [1, 1], struct.pack("<i", 42)),
            ],
            metadata={"format": "pt"},
        ),
        "zero_size.safetensors": encode(
            [
                ("empty_a", "F32", [0, 4], b""),
                ("empty_b", "BF16", [3, 0], b""),
                ("x", "F32", [1], struct.pack("<f", 5)),
                ("scalar", "F32", [], struct.pack("<f", 2)),
            ]
        ),
        "rank8.safetensors": encode([("r8", "U8", [1, 1, 1, 1, 1, 1, 2, 2], bytes(range(4)))]),
        "blocks.safetensors": encode(
            [
                ("norm", "F32", [2], struct.pack("<2f", 1, 2)),
                ("q8", "Q8_0", [2, 32], bytes(range(68))),
                ("q4", "Q4_0", [1, 32], bytes(range(18))),
                ("q4k", "Q4_K", [1, 256], bytes(range(144))),
                ("q5k", "Q5_K", [1, 256], bytes(range(176))),
                ("q6k", "Q6_K", [1, 256], bytes(range(210))),
            ]
        ),
    }
    # The fuzzer also frames an input that starts with '{' as header JSON + data
    # (it adds the length prefix), so one seed comes without its prefix.
    seeds["mixed_dtypes_no_prefix.safetensors"] = seeds["mixed_dtypes.safetensors"][8:]
    for name, data in seeds.items():
        assert len(data) < 4096, name
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
