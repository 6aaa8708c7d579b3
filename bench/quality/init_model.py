"""A random Llama of another size for the quality benchmark's --width and
--layers: the demo's architecture (examples/demo/model: head_dim 16, half
as many key-value heads as heads, an MLP three times the width) and its
tokenizer, with weights drawn as transformers initialises a Llama (normal,
std initializer_range 0.02; norms 1), in bf16. Only the standard library:
the benchmark runs where tacod builds, without torch.
"""
import json
import os
import random
import shutil
import struct


def _bf16(values):
    """bf16 bytes of VALUES, rounded to nearest even."""
    out = bytearray(2 * len(values))
    for i, v in enumerate(values):
        b = struct.unpack("<I", struct.pack("<f", v))[0]
        b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        struct.pack_into("<H", out, 2 * i, b & 0xFFFF)
    return bytes(out)


def shapes(cfg):
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    out = {"model.embed_tokens.weight": [v, h], "lm_head.weight": [v, h],
           "model.norm.weight": [h]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": [h],
            p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [q, h],
            p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h],
            p + "self_attn.o_proj.weight": [h, q],
            p + "mlp.gate_proj.weight": [f, h],
            p + "mlp.up_proj.weight": [f, h],
            p + "mlp.down_proj.weight": [h, f],
        })
    return out


def write(demo, out, width, layers, seed=2026):
    """Writes the model directory OUT (replacing it) from the demo's files
    in DEMO; returns its parameter count."""
    if width % 32:
        raise ValueError(f"--width {width}: a multiple of 32 (heads of 16)")
    with open(os.path.join(demo, "config.json")) as f:
        cfg = json.load(f)
    heads = width // 16
    cfg.update(hidden_size=width, intermediate_size=3 * width,
               num_hidden_layers=layers, num_attention_heads=heads,
               num_key_value_heads=heads // 2, head_dim=16)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in ("tokenizer.json", "tokenizer_config.json",
                 "generation_config.json"):
        shutil.copy(os.path.join(demo, name), tmp)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    rng = random.Random(seed)
    std = cfg["initializer_range"]
    header, blobs, off, n = {"__metadata__": {"format": "pt"}}, [], 0, 0
    for name, shape in sorted(shapes(cfg).items()):
        count = 1
        for d in shape:
            count *= d
        vals = ([1.0] * count if len(shape) == 1 else
                [rng.gauss(0.0, std) for _ in range(count)])
        blobs.append(_bf16(vals))
        header[name] = {"dtype": "BF16", "shape": shape,
                        "data_offsets": [off, off + 2 * count]}
        off += 2 * count
        n += count
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(tmp, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return n
