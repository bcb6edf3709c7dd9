#!/usr/bin/env python3
"""Writes a tessera checkpoint (config.json + model.safetensors of a Llama model, as
`tessera random-checkpoint` makes) as a GGUF that llama.cpp loads, with llama.cpp's own
gguf-py, so that both engines read the same weight bytes.

    PYTHONPATH=<llama.cpp>/gguf-py python3 tessera_to_gguf.py CHECKPOINT_DIR OUT.gguf

Facts taken from llama.cpp's converter (conversion/llama.py and conversion/base.py of
the source this is run against), not its code:
  - tensor names: token_embd, blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,
    ffn_norm,ffn_gate,ffn_up,ffn_down}, output_norm, output (absent when tied);
  - q and k rows are permuted from the Hugging Face half-split rope layout to llama.cpp's
    interleaved pairs: rows (head, half, i) are reordered to (head, i, half);
  - 1-D tensors (the norms) are stored as F32, the matrices keep the checkpoint's dtype
    (BF16 stays BF16, F16 stays F16: the same bytes tessera reads);
  - "llama3" rope scaling becomes a rope_freqs tensor of per-frequency factors.
The vocabulary is a placeholder ("llama" sentencepiece type: <unk>, <s>, </s>, the 256
byte tokens, then dummies up to vocab_size): llama-bench feeds random token ids and only
needs the count to match the embedding. Needs numpy (Debian: python3-numpy).
"""

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("[tessera_to_gguf] put llama.cpp's gguf-py on PYTHONPATH (PYTHONPATH=<llama.cpp>/gguf-py)")

SAFETENSORS_DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}


def read_safetensors(path):
    """Maps every tensor of a safetensors file: {name: (dtype string, numpy array)}."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        if dtype not in SAFETENSORS_DTYPES:
            sys.exit(f"[tessera_to_gguf] {name}: dtype {dtype} is not bf16, f16 or f32")
        begin, end = info["data_offsets"]
        array = data[begin:end].view(SAFETENSORS_DTYPES[dtype]).reshape(info["shape"])
        tensors[name] = (dtype, array)
    return tensors


def to_f32(dtype, array):
    if dtype == "BF16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(np.float32)


def rope_permute(rows, n_head):
    """Half-split rope rows (head, half, i) to llama.cpp's interleaved (head, i, half)."""
    shape = rows.shape
    return np.ascontiguousarray(
        rows.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape))


def llama3_rope_factors(config, head_dim):
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type", "")).lower() != "llama3":
        return None
    base = config.get("rope_theta", 10000.0)
    factor = scaling.get("factor", 8.0)
    low = scaling.get("low_freq_factor", 1.0)
    high = scaling.get("high_freq_factor", 4.0)
    old_context = scaling.get("original_max_position_embeddings", 8192)
    factors = []
    for i in range(0, head_dim, 2):
        wavelength = 2 * math.pi * base ** (i / head_dim)
        if wavelength < old_context / high:
            factors.append(1.0)
        elif wavelength > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelength - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    checkpoint, out = Path(sys.argv[1]), Path(sys.argv[2])
    config = json.loads((checkpoint / "config.json").read_text())
    if config.get("model_type") != "llama":
        sys.exit(f"[tessera_to_gguf] model_type {config.get('model_type')!r}: only llama is converted")
    tensors = read_safetensors(checkpoint / "model.safetensors")

    n_layer = config["num_hidden_layers"]
    n_head = config["num_attention_heads"]
    n_head_kv = config.get("num_key_value_heads", n_head)
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim") or hidden // n_head
    vocab_size = config["vocab_size"]

    weight_dtype = tensors["model.embed_tokens.weight"][0]
    file_type = {"BF16": gguf.LlamaFileType.MOSTLY_BF16, "F16": gguf.LlamaFileType.MOSTLY_F16,
                 "F32": gguf.LlamaFileType.ALL_F32}[weight_dtype]

    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA]
    writer = gguf.GGUFWriter(out, arch)
    writer.add_name(f"tessera random checkpoint {checkpoint.name}")
    writer.add_file_type(file_type)
    writer.add_block_count(n_layer)
    writer.add_context_length(config.get("max_position_embeddings", 4096))
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    if head_dim != hidden // n_head:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(config.get("rope_theta", 10000.0))
    writer.add_layer_norm_rms_eps(config.get("rms_norm_eps", 1e-5))
    writer.add_vocab_size(vocab_size)

    # Placeholder sentencepiece vocabulary: ids 0-2 special, 3-258 bytes, the rest dummies.
    if vocab_size < 259:
        sys.exit(f"[tessera_to_gguf] vocab_size {vocab_size} < 259 leaves no room for the byte tokens")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    tokens += [f"tok{i}" for i in range(len(tokens), vocab_size)]
    types += [gguf.TokenType.NORMAL] * (vocab_size - len(types))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([-float(i) for i in range(vocab_size)])
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    for layer in range(n_layer):
        for hf, ours in per_layer.items():
            names[f"model.layers.{layer}.{hf}.weight"] = f"blk.{layer}.{ours}.weight"

    factors = llama3_rope_factors(config, head_dim)
    if factors is not None:
        writer.add_tensor("rope_freqs.weight", factors)

    for name, (dtype, array) in tensors.items():
        if name not in names:
            sys.exit(f"[tessera_to_gguf] no llama.cpp name for tensor {name}")
        if name.endswith("q_proj.weight"):
            array = rope_permute(array, n_head)
        elif name.endswith("k_proj.weight"):
            array = rope_permute(array, n_head_kv)
        if array.ndim <= 1:
            writer.add_tensor(names[name], to_f32(dtype, array))
        elif dtype == "BF16":
            writer.add_tensor(names[name], array, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            writer.add_tensor(names[name], array)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()


if __name__ == "__main__":
    main()
