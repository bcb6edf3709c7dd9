"""Trains tessera's own small model on the GPU machine: a byte-level BPE tokenizer
(Hugging Face tokenizers) and a Llama-architecture decoder (transformers +
PyTorch), then evaluates it and writes everything the repository keeps.

  PYTHONUNBUFFERED=1 python3 tools/train_model/train.py --corpus .corpus --out $OUT/m --minutes 2

The corpus is small (5.8 M tokens), so a short run whose learning rate has fully
decayed beats a long one: an 8-minute run reached its best validation perplexity
(42.9) after 1,500 of 15,000 steps and only overfitted after that.

Inputs: .corpus/{train,heldout}.txt.xz from make_corpus.py (documents separated
by a <|end_of_text|> line). Outputs in --out:
  config.json (transformers 4.x-style keys), model.safetensors (bf16, tied
  embeddings), tokenizer.json, tokenizer_config.json, generation_config.json,
  eval.json (held-out perplexity, greedy continuations, a sampled continuation;
  the checkpoint kept is the one with the best perplexity on the validation half
  of the held-out paragraphs; the perplexity reported is on the other half),
  reference.safetensors (prompt ids, greedy ids, logits [9, vocab] from
  transformers in bf16, as tests/fixtures/models/*/reference.safetensors),
  tokenizer_reference.json (texts and their ids from HF tokenizers).
"""
import argparse
import json
import lzma
import math
import os
import time

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
CHAT_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + "
    "'<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")
PROMPTS = ["It is a truth universally acknowledged", "In the beginning", "The weather was",
           "She could not help"]
SEQ = 512


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def read_docs(path):
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return [d for d in f.read().split(f"\n{EOS}\n") if d.strip()]


def train_tokenizer(docs, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS] + CHAT_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2)
    tok.train_from_iterator(docs, trainer=trainer)
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, bos)])
    return tok


def encode_stream(tok, docs):
    eos = tok.token_to_id(EOS)
    ids = []
    for i in range(0, len(docs), 4096):
        for enc in tok.encode_batch(docs[i:i + 4096], add_special_tokens=False):
            ids.extend(enc.ids)
            ids.append(eos)
    return torch.tensor(ids, dtype=torch.int32)


def rewrite_config_4x(path):
    """transformers 5 writes rope_parameters and dtype; most published checkpoints use 4.x keys."""
    p = os.path.join(path, "config.json")
    cfg = json.load(open(p))
    rope = dict(cfg.pop("rope_parameters", None) or {})
    cfg["rope_theta"] = float(rope.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
    rope.pop("rope_type", None)
    cfg["rope_scaling"] = None
    assert not rope, f"unexpected rope parameters {rope}"
    cfg["torch_dtype"] = cfg.pop("dtype", "bfloat16")
    json.dump(cfg, open(p, "w"), indent=2, sort_keys=True)


@torch.no_grad()
def perplexity(model, ids, device):
    model.eval()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=next(model.parameters()).dtype == torch.float32)
    nll, count = 0.0, 0
    for i in range(0, len(ids) - 1, SEQ):
        x = ids[i:i + SEQ + 1].long().to(device)
        if len(x) < 2:
            break
        with autocast:
            logits = model(x[None, :-1]).logits.float()
        nll += torch.nn.functional.cross_entropy(logits[0], x[1:], reduction="sum").item()
        count += len(x) - 1
    return math.exp(nll / count)


@torch.no_grad()
def greedy_rows(model, ids, steps):
    """Logits after the prompt and after each greedy token (full forward each time, no cache)."""
    seq, rows, new = list(ids), [], []
    for i in range(steps + 1):
        logits = model(torch.tensor([seq], device=model.device)).logits[0, -1].float().cpu()
        rows.append(logits)
        if i < steps:
            new.append(int(logits.argmax()))
            seq.append(new[-1])
    return new, torch.stack(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=".corpus")
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=2)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args()
    torch.manual_seed(0)
    device = "cuda"
    os.makedirs(args.out, exist_ok=True)
    log("torch", torch.__version__, "transformers", transformers.__version__)

    train_docs = read_docs(os.path.join(args.corpus, "train.txt.xz"))
    held_docs = read_docs(os.path.join(args.corpus, "heldout.txt.xz"))
    tok = train_tokenizer(train_docs, args.vocab)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    # The held-out paragraphs are split in two: validation (picks the best checkpoint) and test (reported).
    train_ids = encode_stream(tok, train_docs)
    val_ids, held_ids = encode_stream(tok, held_docs[0::2]), encode_stream(tok, held_docs[1::2])
    log(f"tokenizer: {tok.get_vocab_size()} tokens; train {len(train_ids)} tokens, held-out {len(held_ids)}")
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    json.dump({"bos_token": BOS, "eos_token": EOS, "chat_template": CHAT_TEMPLATE, "add_bos_token": True,
               "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 2048, "clean_up_tokenization_spaces": False},
              open(os.path.join(args.out, "tokenizer_config.json"), "w"), indent=2)

    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=384, intermediate_size=1024,
                         num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2, head_dim=64,
                         max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=True, bos_token_id=bos, eos_token_id=eos, initializer_range=0.02)
    model = LlamaForCausalLM(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f} M parameters, {2 * n_params / 1e6:.1f} MB in bf16")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    data = train_ids.to(device)
    budget = args.minutes * 60
    start, step, total_steps = time.time(), 0, None
    best = (float("inf"), 0, None)  # validation perplexity, step, weights
    model.train()
    while True:
        elapsed = time.time() - start
        if total_steps is None and step == 50:
            total_steps = int(budget / (elapsed / 50))
            log(f"{elapsed / 50 * 1000:.1f} ms/step -> {total_steps} steps")
        if total_steps is not None and step >= total_steps:
            break
        warm = min(1.0, (step + 1) / 200)
        progress = step / total_steps if total_steps else 0.0
        for g in opt.param_groups:
            g["lr"] = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        starts = torch.randint(0, len(data) - SEQ - 1, (args.batch,), device=device)
        batch = torch.stack([data[s:s + SEQ + 1] for s in starts.tolist()]).long()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 500 == 0 or step == total_steps:
            val = perplexity(model, val_ids, device)
            model.train()
            if val < best[0]:
                best = (val, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
            log(f"step {step} loss {loss.item():.3f} lr {opt.param_groups[0]['lr']:.2e} validation ppl {val:.2f}")
    log(f"trained {step} steps, {step * args.batch * SEQ / 1e6:.0f} M tokens in {time.time() - start:.0f} s; "
        f"best validation ppl {best[0]:.2f} at step {best[1]}")
    model.load_state_dict(best[2])

    model.to(torch.bfloat16).save_pretrained(args.out)
    rewrite_config_4x(args.out)
    model = AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.bfloat16, attn_implementation="eager").to(device)
    model.eval()
    ev = {"parameters": n_params, "train_tokens_seen": step * args.batch * SEQ, "steps": step,
          "best_step": best[1], "validation_perplexity": best[0],
          "train_corpus_tokens": len(train_ids), "heldout_tokens": len(held_ids),
          "heldout_perplexity": perplexity(model, held_ids, device),
          "torch": torch.__version__, "transformers": transformers.__version__, "greedy": {}}
    for prompt in PROMPTS:
        ids = tok.encode(prompt).ids  # with BOS from the post-processor
        out = model.generate(torch.tensor([ids], device=device), max_new_tokens=40, do_sample=False)
        ev["greedy"][prompt] = tok.decode(out[0, len(ids):].tolist())
    torch.manual_seed(1234)
    ids = tok.encode(PROMPTS[0]).ids
    out = model.generate(torch.tensor([ids], device=device), max_new_tokens=200, min_new_tokens=200,
                         do_sample=True, temperature=0.8, top_k=40)
    ev["sampled_200"] = {"prompt": PROMPTS[0], "temperature": 0.8, "top_k": 40, "seed": 1234,
                         "text": tok.decode(out[0, len(ids):].tolist())}
    log(json.dumps(ev, indent=1))
    json.dump(ev, open(os.path.join(args.out, "eval.json"), "w"), indent=2)

    # Reference logits for the engine's tests, computed on the CPU in bf16 as the fixtures are.
    cpu_model = AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.bfloat16, attn_implementation="eager")
    cpu_model.eval()
    prompt = tok.encode(PROMPTS[0]).ids
    new, rows = greedy_rows(cpu_model, prompt, 8)
    save_file({"prompt_ids": torch.tensor(prompt, dtype=torch.int64), "greedy_ids": torch.tensor(new, dtype=torch.int64),
               "logits": rows.contiguous()}, os.path.join(args.out, "reference.safetensors"),
              metadata={"dtype": "bfloat16", "tolerance": "2e-2", "torch": torch.__version__,
                        "transformers": transformers.__version__, "prompt": PROMPTS[0]})
    texts = PROMPTS + [held_docs[i] for i in range(0, min(len(held_docs), 400), 40)]
    json.dump([{"text": t, "ids": tok.encode(t).ids} for t in texts],
              open(os.path.join(args.out, "tokenizer_reference.json"), "w"), indent=1, ensure_ascii=False)
    log("done")


if __name__ == "__main__":
    main()
