#!/usr/bin/env python3
"""Hugging Face transformers on the checkpoint that `tessera bench --model DIR --device cuda`
runs (written by `tessera random-checkpoint`), on the same GPU in the same call: prefill
speed at each --prefill length (logits of the last token only, as tessera computes), and
batch-1 greedy decode of --decode tokens after a --prompt-token prompt with the KV cache.
Times are CUDA-synchronized wall clock after a warm-up run.

  python3 tools/gpu/hf_peer.py --model /tmp/ckpt-llama-3-8b
"""
import argparse
import time

import torch
from transformers import AutoModelForCausalLM


def seconds(fn, reps):
    fn()  # warm-up
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--decode", type=int, default=128)
    parser.add_argument("--prefill", type=int, nargs="*", default=[512, 2048])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).cuda().eval()
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(args.seed)
    print(f"transformers on {torch.cuda.get_device_name()}: {model.config.model_type}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, bf16, "
          f"attention {model.config._attn_implementation}")
    with torch.inference_mode():
        for n in args.prefill:
            ids = torch.randint(0, vocab, (1, n), generator=generator).cuda()
            s = seconds(lambda: model(ids, use_cache=False, logits_to_keep=1), 3)
            print(f"prefill           {n / s:.1f} tok/s ({n}-token prompt)")

        prompt = torch.randint(0, vocab, (1, args.prompt), generator=generator).cuda()

        def decode():
            out = model(prompt, use_cache=True, logits_to_keep=1)
            past = out.past_key_values
            token = out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.decode):
                out = model(token, past_key_values=past, use_cache=True)
                past = out.past_key_values
                token = out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            return time.perf_counter() - start

        decode()  # warm-up
        s = decode()
        print(f"decode            {args.decode / s:.2f} tok/s (batch 1, {args.decode} tokens after a "
              f"{args.prompt}-token prompt)")


if __name__ == "__main__":
    main()
