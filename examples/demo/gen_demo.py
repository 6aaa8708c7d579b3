#!/usr/bin/env python3
"""The demo that ships with tacod: a tiny random Llama in Hugging Face
format and a chat task that it learns within a minute on a CPU.

  model/       config.json, model.safetensors (bf16), tokenizer.json
               (byte-level BPE), tokenizer_config.json (the ChatML chat
               template tacod renders), generation_config.json
  train.jsonl  OpenAI chat format: "4 numbers after 35" -> "Sure: 36 37 38 39"
  val.jsonl    the same task on (start, count) pairs that train.jsonl
               never shows: the model must combine what it learned
  pref_train.jsonl, pref_val.jsonl
               preference pairs in OpenAI's DPO format for the model that
               train.jsonl fine-tuned: the right count preferred over one
               number too many or too few; pref_val.jsonl holds the 48
               pairs of val.jsonl, never trained on

The model starts from random weights and knows nothing but what a job
teaches it, so the effect of a job is plain to see: validation token
accuracy goes from chance to near 1, and the downloaded model counts.
Deterministic: every run writes the same bytes.

    /opt/tacofix/bin/python examples/demo/gen_demo.py
"""
import json
import math
import os
import random

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast)

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "model")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# ChatML exactly as tacod renders it (docs/datasets.md), plus the
# generation prompt that transformers' generate() needs. (transformers
# renders with trim_blocks: the newlines are written as expressions.)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}{{ '\\n' }}"
    "{{ m['content'] }}<|im_end|>{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}"
    "{% endif %}")

# Every number of the task is one token (" 35"); the counts 3..6 keep
# every answer under 100. The answer starts with "Sure:" so that its first
# number has a leading space too: it is then the successor of the prompt's
# token, the same mapping as between the answer's numbers. Written without
# the space ("36", another token) it is learned much later: with TACO at a
# constant lr 0.003, validation token accuracy was 0.81 at step 800 and
# 0.98 only at step 1250, against 0.99 at step 700 with "Sure:".
COUNTS = range(3, 7)
STARTS = range(0, 94)
N_TRAIN = 2000
N_VAL_PAIRS = 48
N_PREF_TRAIN = 1000


def example(start, count):
    return {"messages": [
        {"role": "user", "content": f"{count} numbers after {start}"},
        {"role": "assistant", "content": answer(start, count)}]}


def answer(start, count):
    return "Sure:" + "".join(f" {start + i}" for i in range(1, count + 1))


def preference(start, count, rng):
    """The right count preferred over an off-by-one one, more or fewer at
    random. Both outputs share every token up to the one where they part,
    so only those tokens make the margin. This model is small enough for
    DPO to break it: measured from the tour's fine-tuned model (200 steps
    of 8 pairs, beta 0.1), TACO at lr 3e-5 kept its greedy answers (45 of
    the 48 validation prompts right, as before), 1e-4 lost two and 5e-4
    all but one, with held-out reward accuracy 1.0 in every case."""
    wrong = count + 1 if rng.random() < 0.5 else count - 1
    return {"input": {"messages": [
        {"role": "user", "content": f"{count} numbers after {start}"}]},
        "preferred_output": [
            {"role": "assistant", "content": answer(start, count)}],
        "non_preferred_output": [
            {"role": "assistant", "content": answer(start, wrong)}]}


def train_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [f"user assistant system {n} numbers after {s}. Sure: {s}"
              for n in COUNTS for s in range(100)]
    tok.train_from_iterator(corpus, trainer)
    return tok


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def targets(fast, messages):
    """ids, and the positions tacod trains: the assistant's tokens and its
    <|im_end|>."""
    ids = fast.apply_chat_template(messages, tokenize=True,
                                   return_dict=False)
    start = fast.apply_chat_template(messages[:-1], tokenize=True,
                                     add_generation_prompt=True,
                                     return_dict=False)
    assert ids[:len(start)] == start
    end = ids.index(fast.eos_token_id, len(start))
    return ids, range(len(start), end + 1)


def evaluate(model, fast, rows):
    """Validation loss and token accuracy as tacod reports them."""
    nll, right, n = 0.0, 0, 0
    with torch.no_grad():
        for r in rows:
            ids, pos = targets(fast, r["messages"])
            logits = model(torch.tensor([ids])).logits[0].float()
            lp = torch.log_softmax(logits, -1)
            for t in pos:
                nll -= float(lp[t - 1, ids[t]])
                right += int(int(lp[t - 1].argmax()) == ids[t])
                n += 1
    return nll / n, right / n


def main():
    tok = train_tokenizer()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>",
        pad_token="<|endoftext|>", model_max_length=256)
    fast.chat_template = CHATML
    for n in range(100):
        assert len(fast(f" {n}")["input_ids"]) == 1, n

    os.makedirs(MODEL, exist_ok=True)
    for name in os.listdir(MODEL):
        os.remove(os.path.join(MODEL, name))
    # the template inside tokenizer_config.json, where most tools look
    fast.save_pretrained(MODEL, save_jinja_files=False)

    torch.manual_seed(2026)
    cfg = LlamaConfig(
        vocab_size=len(fast), hidden_size=64, intermediate_size=192,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, max_position_embeddings=256, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        max_new_tokens=16, do_sample=False)
    model.save_pretrained(MODEL, safe_serialization=True)

    rng = random.Random(2026)
    pairs = [(s, n) for s in STARTS for n in COUNTS]
    rng.shuffle(pairs)
    val_pairs, train_pairs = pairs[:N_VAL_PAIRS], pairs[N_VAL_PAIRS:]
    # every start and every count is still seen in training
    assert {s for s, _ in train_pairs} == set(STARTS)
    assert {n for _, n in train_pairs} == set(COUNTS)
    train = [example(*rng.choice(train_pairs)) for _ in range(N_TRAIN)]
    val = [example(*p) for p in sorted(val_pairs)]
    write_jsonl(os.path.join(HERE, "train.jsonl"), train)
    write_jsonl(os.path.join(HERE, "val.jsonl"), val)
    # a generator of their own: the files above stay as they were
    prng = random.Random(2027)
    write_jsonl(os.path.join(HERE, "pref_train.jsonl"),
                [preference(*prng.choice(train_pairs), prng)
                 for _ in range(N_PREF_TRAIN)])
    write_jsonl(os.path.join(HERE, "pref_val.jsonl"),
                [preference(*p, prng) for p in sorted(val_pairs)])

    loss, acc = evaluate(model, fast, val)
    size = sum(os.path.getsize(os.path.join(MODEL, n))
               for n in os.listdir(MODEL))
    print(f"vocab {len(fast)}, {model.num_parameters()} parameters, "
          f"model/ {size} bytes; {len(train)} train, {len(val)} val "
          f"examples; untrained: val loss {loss:.3f} "
          f"(ln vocab {math.log(len(fast)):.3f}), token accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
