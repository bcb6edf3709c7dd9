#!/usr/bin/env python3
"""torch.matmul (cuBLAS) on the shapes bench/cuda_bench.cpp times, bf16 weights and
activations with f32 accumulation (what a transformers bf16 model runs), so that the
tensor-core matmul's TFLOP/s has a peer measured in the same device call.

  python3 tools/gpu/matmul_peer.py
"""
import torch

SHAPES = [("q/o 4096x4096", 4096, 4096), ("k/v 1024x4096", 1024, 4096),
          ("gate/up 14336x4096", 14336, 4096), ("down 4096x14336", 4096, 14336),
          ("lm_head 128256x4096", 128256, 4096)]


def main():
    print(f"torch {torch.__version__} matmul on {torch.cuda.get_device_name()}")
    print(f"{'matmul (bf16)':22} {'tokens':>6} {'us':>10} {'TFLOP/s':>9}")
    for name, n, k in SHAPES:
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        for tokens in (64, 512, 2048):
            x = torch.randn(tokens, k, dtype=torch.bfloat16, device="cuda")
            for _ in range(3):
                torch.matmul(x, w.t())
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                torch.matmul(x, w.t())
            end.record()
            torch.cuda.synchronize()
            sec = start.elapsed_time(end) / 1e3 / 10
            print(f"{name:22} {tokens:6d} {sec * 1e6:10.1f} {2 * tokens * n * k / sec / 1e12:9.2f}")


if __name__ == "__main__":
    main()
