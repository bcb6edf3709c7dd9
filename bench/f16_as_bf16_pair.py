#!/usr/bin/env python3
# Issue 15, point 3 (f16 prefill): can an f16 weight w go to the bf16 tile products (tdpbf16ps) as
# the exact sum of two bf16, hi = w rounded to bf16 (truncated, or to nearest even) and
# lo = w - hi? And is lo ever a bf16 subnormal, which the instruction reads as zero? Checked over
# all 65,536 f16 bit patterns, in plain Python (f32 arithmetic through struct); the answer is in
# docs/benchmarks.md ("GPU host (Xeon), the AMX GEMM's packing without calls").
#   python3 bench/f16_as_bf16_pair.py
import math
import struct


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def from_bits(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def significant_bits(x):
    m, _ = math.frexp(abs(x))
    bits = 0
    while m != int(m):
        m *= 2
        bits += 1
    return bits


ROUNDINGS = (
    ("truncated", lambda b: b >> 16),
    ("nearest even", lambda b: (b + 0x7FFF + ((b >> 16) & 1)) >> 16),
)
for name, to_bf16 in ROUNDINGS:
    finite = exact = sums = lo_zero = subnormal = most_bits = 0
    smallest = math.inf
    for h in range(65536):
        w = struct.unpack("<e", struct.pack("<H", h))[0]
        if not math.isfinite(w):
            continue
        finite += 1
        hi = from_bits(to_bf16(f32_bits(w)) << 16)
        lo = from_bits(f32_bits(w - hi))  # w - hi is exact in Python's doubles; then to f32
        exact += (f32_bits(lo) & 0xFFFF) == 0 and lo == w - hi  # lo is a bf16, and exactly w - hi
        sums += hi + lo == w
        if lo == 0:
            lo_zero += 1
            continue
        smallest = min(smallest, abs(lo))
        subnormal += abs(lo) < 2.0**-126
        most_bits = max(most_bits, significant_bits(lo))
    print(f"{name}: {finite} finite f16; lo exactly a bf16: {exact}; hi + lo == w: {sums}; lo == 0: {lo_zero}; "
          f"lo a bf16 subnormal: {subnormal}; smallest nonzero |lo|: 2^{math.log2(smallest):g}; "
          f"most significant bits of lo: {most_bits}")
