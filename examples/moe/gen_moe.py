#!/usr/bin/env python3
"""Tiny random mixtures of experts for the demo's counting task
(examples/demo): the same tokenizer and chat template, a model of another
family, so that a mixture of experts is fine-tuned through the API as the
demo is (README.md, "Mixtures of experts").

  qwen3-moe/   Qwen3MoeForCausalLM: hidden 64, 2 layers, 8 SwiGLU experts
               of 64 columns, 2 a token (norm_topk_prob), bf16
  gpt-oss/     GptOssForCausalLM: hidden 64, 2 layers (sliding, full), 8
               fused experts of 64 columns with biases, 2 a token, sinks,
               YaRN as gpt-oss-20b has it, bf16

The tokenizer files are the demo's, copied. Deterministic: every run
writes the same bytes.

    /opt/tacofix/bin/python examples/moe/gen_moe.py
"""
import os
import shutil

import torch
from transformers import (GenerationConfig, GptOssConfig, GptOssForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
DEMO = os.path.join(HERE, "..", "demo", "model")
TOKENIZER = ["tokenizer.json", "tokenizer_config.json"]


def write(name, model):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    for n in os.listdir(d):
        os.remove(os.path.join(d, n))
    for n in TOKENIZER:
        shutil.copy(os.path.join(DEMO, n), os.path.join(d, n))
    model.generation_config = GenerationConfig(
        eos_token_id=model.config.eos_token_id,
        pad_token_id=model.config.pad_token_id, max_new_tokens=16,
        do_sample=False)
    model.save_pretrained(d, safe_serialization=True)
    print(f"{name}: {model.num_parameters()} parameters")


def main():
    with open(os.path.join(DEMO, "config.json")) as f:
        import json
        demo = json.load(f)
    torch.manual_seed(2026)
    cfg = Qwen3MoeConfig(
        vocab_size=demo["vocab_size"], hidden_size=64, intermediate_size=192,
        moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, max_position_embeddings=256, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=demo["eos_token_id"],
        pad_token_id=demo["pad_token_id"])
    write("qwen3-moe", Qwen3MoeForCausalLM(cfg).to(torch.bfloat16).eval())
    torch.manual_seed(2027)
    cfg = GptOssConfig(
        vocab_size=demo["vocab_size"], hidden_size=64, intermediate_size=64,
        num_local_experts=8, num_experts_per_tok=2, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        sliding_window=128, max_position_embeddings=256,
        rope_parameters=dict(rope_type="yarn", rope_theta=150000.0,
                             factor=32.0, beta_fast=32.0, beta_slow=1.0,
                             truncate=False,
                             original_max_position_embeddings=4096),
        tie_word_embeddings=False, bos_token_id=None,
        eos_token_id=demo["eos_token_id"], pad_token_id=demo["pad_token_id"])
    write("gpt-oss", GptOssForCausalLM(cfg).to(torch.bfloat16).eval())


if __name__ == "__main__":
    main()
