#!/usr/bin/env python3
"""The tool-calling example: a tiny random Llama in Hugging Face format
whose own chat template renders OpenAI-style tools, and chats in OpenAI's
fine-tuning format that teach it to call them.

  model/       config.json (the demo's Llama: 2 layers, width 64),
               model.safetensors (bf16, random: N(0, 0.02) as transformers
               initializes a Llama), tokenizer.json (byte-level BPE trained
               on train.jsonl's rendered chats; ChatML's special tokens;
               <tool_call> </tool_call> <tool_response> </tool_response>
               added as non-special tokens, as Qwen has them),
               tokenizer_config.json (TEMPLATE below), generation_config.json
  train.jsonl  2,000 chats. With "tools" (get_weather and get_time, both
               offered): a user asks for the weather or the time in a city;
               the assistant calls the right tool ("tool_calls", the
               arguments a JSON string; "content" null or left out); in 60%
               of them the tool's result follows (a "tool" message with the
               call's "tool_call_id") and the assistant says it in one
               sentence, phrased by the weather's condition. Without tools
               (40%): the same questions, and the assistant says it cannot
               look it up, naming the city.
  val.jsonl    100 chats, held out: phrasings of the question that
               train.jsonl never shows, and (tool, city, result)
               combinations that it never shows

The model starts from random weights and knows nothing but what a job
teaches it: whether it has tools, which tool the question needs, the city
to copy into the call's arguments, and the result's values to put into the
answer. Copying the city is what a model this small learns last: with the
tools' JSON in front of every question (140 tokens and more) it learned it
late or not at all within a minute. The chats without tools are short, so
with packing many of them fill one sequence; the model learns to copy
there first, and then in the long chats. Measured with AdamW (README.md,
"Tool calling"): validation token accuracy 0.97 to 1.00 after 1,000 steps
of 8 sequences of 224 tokens, seeds 0 to 2; in development, a quarter of
the chats without tools and no packing gave 0.91 to 0.93, and TACO,
made for fine-tuning, stayed near 0.9 with the city wrong.
Deterministic: every run writes the same bytes. Needs numpy, tokenizers and
jinja2, not torch; transformers, where installed, checks that
apply_chat_template renders every chat as this script does:

    python3 -m venv /tmp/toolvenv && /tmp/toolvenv/bin/pip install \\
        tokenizers==0.23.3 numpy safetensors==0.8.0 jinja2==3.1.6 \\
        transformers==5.24.0
    /tmp/toolvenv/bin/python examples/tools/gen_tools.py
"""
import json
import os
import random
import struct
import sys

import numpy as np
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,
                        pre_tokenizers, processors, trainers)

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "model")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>",
               "</tool_response>"]
# The pre-tokenizer's pattern: GPT-2's, except that a run of punctuation
# goes on over spaces into more punctuation, so that '": "', '", "' and
# '"}}' can each become one token: the tools' JSON in the system turn is a
# third shorter.
PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+"
           r"| ?[^\s\p{L}\p{N}]+(?:[ ]+[^\s\p{L}\p{N}]+)*|\s+(?!\S)|\s+")
# More than the corpus gives: every pre-token of train.jsonl's chats ends up
# one token (738 in all, the tool tags included).
VOCAB = 1024

# The chat template, ours, in the manner of Qwen2.5's and Qwen3's tool
# template: with tools, a system turn that lists them as JSON lines inside
# <tools></tools> (after the chat's own system message, when it has one);
# an assistant's tool calls as <tool_call>{"name": ..., "arguments": ...}
# </tool_call> (the arguments through tojson when they are a mapping, as
# they are when tacod or vLLM parsed OpenAI's JSON string, or as they are
# when still a string); the results of consecutive tool messages in one
# user turn, each in <tool_response></tool_response>. transformers renders
# with trim_blocks and lstrip_blocks: newlines are written as expressions.
TEMPLATE = (
    "{%- set sys = messages[0]['content'] if messages and "
    "messages[0]['role'] == 'system' else none -%}"
    "{%- if tools -%}"
    "<|im_start|>system{{ '\\n' }}"
    "{%- if sys %}{{ sys }}{{ '\\n\\n' }}{% endif -%}"
    "Tools:{{ '\\n' }}<tools>"
    "{%- for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor -%}"
    "{{ '\\n' }}</tools>{{ '\\n' }}"
    "Call one as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>."
    "<|im_end|>{{ '\\n' }}"
    "{%- elif sys is not none -%}"
    "<|im_start|>system{{ '\\n' }}{{ sys }}<|im_end|>{{ '\\n' }}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}"
    "{%- if not loop.first %}{{ raise_exception("
    "'a system message must come first') }}{% endif -%}"
    "{%- elif m['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}"
    "<|im_start|>user"
    "{%- endif -%}"
    "{{ '\\n' }}<tool_response>{{ '\\n' }}{{ m['content'] }}{{ '\\n' }}"
    "</tool_response>"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}"
    "<|im_end|>{{ '\\n' }}"
    "{%- endif -%}"
    "{%- elif m['role'] == 'assistant' -%}"
    "<|im_start|>assistant{{ '\\n' }}"
    "{%- if m['content'] %}{{ m['content'] }}{% endif -%}"
    "{%- for c in m['tool_calls'] or [] -%}"
    "{%- set f = c['function'] if c['function'] is defined else c -%}"
    "{%- if m['content'] or not loop.first %}{{ '\\n' }}{% endif -%}"
    "<tool_call>{{ '\\n' }}{\"name\": \"{{ f['name'] }}\", \"arguments\": "
    "{%- if f['arguments'] is string %} {{ f['arguments'] }}"
    "{%- else %} {{ f['arguments'] | tojson }}{% endif -%}"
    "}{{ '\\n' }}</tool_call>"
    "{%- endfor -%}"
    "<|im_end|>{{ '\\n' }}"
    "{%- else -%}"
    "<|im_start|>{{ m['role'] }}{{ '\\n' }}{{ m['content'] }}<|im_end|>"
    "{{ '\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}"
    "{% endif -%}")

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time",
        "description": "Local time in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]}}},
]

CITIES = ["Paris", "London", "Berlin", "Madrid", "Rome", "Vienna", "Oslo",
          "Athens", "Zürich", "Cairo", "Nairobi", "Tokyo", "Seoul", "Delhi",
          "Sydney", "Toronto", "Chicago", "Lima"]

# The question, by tool: train.jsonl's phrasings, then val.jsonl's alone.
# Short and long ones: trained on short questions only, the model answered
# the long held-out "Do you know what time it is in X at the moment?" with
# an empty call.
ASK = {
    "get_weather": (
        ["What's the weather in {c}?",
         "How is the weather in {c} today?",
         "Weather in {c}, please.",
         "Tell me the weather for {c}.",
         "Is it warm in {c} right now?",
         "What is the temperature in {c}?",
         "Can you look up the weather in {c}?",
         "I need the forecast for {c}.",
         "Do you know the weather in {c}?",
         "What is it like outside in {c} today?",
         "Is it cold in {c} at the moment?",
         "Any news on the weather in {c}?",
         "Can you tell me what the weather is doing in {c} right now?",
         "I am going out soon, so what is the weather like in {c}?",
         "Do you happen to know if it is raining in {c} at the moment?"],
        ["Could you check the weather in {c} for me?",
         "How warm is it in {c} at the moment?",
         "Any idea what the weather is like in {c}?"]),
    "get_time": (
        ["What time is it in {c}?",
         "What's the local time in {c}?",
         "Tell me the time in {c}.",
         "Current time in {c}, please.",
         "Can you look up the time in {c}?",
         "What does the clock say in {c}?",
         "Do you know the time in {c}?",
         "Is it late in {c} right now?",
         "What hour is it in {c} at the moment?",
         "Any idea of the time in {c}?",
         "Can you tell me what time it is over in {c} right now?",
         "I have a call soon, so what is the time in {c}?",
         "Do you happen to know how late it is in {c} at the moment?"],
        ["Could you check the time in {c} for me?",
         "Do you know what time it is in {c} at the moment?"]),
}
GREETINGS = ["", "Hi! ", "Hello. ", "Quick question: ",
             "Good morning, I hope you are well. "]
SYSTEMS = ["You are a helpful assistant.",
           "You answer questions about cities."]

# The last answer's phrasing, fixed by what the tool said: the model can
# learn it exactly.
SAY_WEATHER = {
    "sunny": ("It is sunny and {t} °C in {c}.", range(14, 31)),
    "cloudy": ("It is cloudy in {c}, {t} °C.", range(6, 21)),
    "rainy": ("It is raining in {c} at {t} °C: take an umbrella.",
              range(4, 17)),
    "snowy": ("It is snowing in {c}, {t} °C.", range(-4, 2)),
    "windy": ("It is windy in {c}, {t} °C.", range(5, 19)),
}
SAY_TIME = "It is {h}:{m} in {c}."
# A chat without tools: the model cannot call one, and says so.
SAY_NO_TOOLS = {
    "get_weather": "I cannot check the weather in {c}: I have no tools.",
    "get_time": "I cannot tell the time in {c}: I have no tools.",
}

N_TRAIN = 2000
N_VAL = 100
P_NO_TOOLS = 0.4   # chats without tools (their answer is a sentence)
P_RESULT = 0.6   # of those with tools: chats that go on with the tool's
                 # result and an answer
P_WEATHER = 0.6  # chats about the weather (else the time)
P_SYSTEM = 0.3   # chats with a system message
SEED = 2026


# ---- rendering, as transformers' apply_chat_template does ---------------

def _tojson(x, indent=None, separators=None, sort_keys=False):
    # transformers' tojson (not jinja2's, which escapes for HTML)
    return json.dumps(x, ensure_ascii=False, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _raise(msg):
    raise ValueError(msg)


def compile_template(text):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    return env.from_string(text)


def template_messages(messages):
    """The template's input, as tacod and vLLM make it: each tool call's
    arguments string parsed into an object."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                dict(c, function=dict(
                    c["function"],
                    arguments=json.loads(c["function"]["arguments"])))
                for c in m["tool_calls"]]
        out.append(m)
    return out


def render(tmpl, messages, tools, add_generation_prompt=False):
    return tmpl.render(messages=template_messages(messages), tools=tools,
                       add_generation_prompt=add_generation_prompt,
                       eos_token="<|im_end|>", pad_token="<|endoftext|>")


def trained_spans(tmpl, chat):
    """The character spans tacod trains: each assistant message,
    from the end of the generation prompt through its <|im_end|>."""
    msgs, tools = chat["messages"], chat.get("tools")
    text = render(tmpl, msgs, tools)
    spans = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        start = len(render(tmpl, msgs[:i], tools, True))
        assert text[:start] == render(tmpl, msgs[:i], tools, True)
        end = text.index("<|im_end|>", start) + len("<|im_end|>")
        spans.append((start, end))
    return text, spans


# ---- the data ------------------------------------------------------------

class Ids:
    """Tool call ids as OpenAI writes them: call_ and 24 characters."""

    def __init__(self, rng):
        self.rng = rng

    def __call__(self):
        abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
        return "call_" + "".join(self.rng.choice(abc) for _ in range(24))


def chat(rng, ids, tool, question, city, result, system):
    """One line: the question, the call, and with a result the tool's
    message and the answer."""
    msgs = []
    if system is not None:
        msgs.append({"role": "system", "content": system})
    msgs.append({"role": "user", "content": question})
    if result == "no tools":
        msgs.append({"role": "assistant",
                     "content": SAY_NO_TOOLS[tool].format(c=city)})
        return {"messages": msgs}
    call_id = ids()
    call = {"role": "assistant", "content": None, "tool_calls": [{
        "id": call_id, "type": "function", "function": {
            "name": tool,
            "arguments": json.dumps({"city": city}, ensure_ascii=False)}}]}
    if rng.random() < 0.5:
        del call["content"]  # OpenAI's examples leave it out; null is valid
    msgs.append(call)
    if result is not None:
        if tool == "get_weather":
            cond, t = result
            content = {"city": city, "temperature_c": t, "condition": cond}
            say = SAY_WEATHER[cond][0].format(c=city, t=t)
        else:
            h, mi = result
            content = {"city": city, "time": f"{h}:{mi:02d}"}
            say = SAY_TIME.format(c=city, h=h, m=f"{mi:02d}")
        msgs.append({"role": "tool", "tool_call_id": call_id,
                     "content": json.dumps(content, ensure_ascii=False)})
        msgs.append({"role": "assistant", "content": say})
    return {"messages": msgs, "tools": TOOLS}


def draw(rng, ids, held_out, forbidden):
    """A chat of train.jsonl (held_out False) or val.jsonl: val's
    phrasings are its own, and its (city, result) combinations are never
    in forbidden, the set train.jsonl's are drawn from outside of."""
    tool = "get_weather" if rng.random() < P_WEATHER else "get_time"
    phrasing = rng.choice(ASK[tool][1 if held_out else 0])
    question = rng.choice(GREETINGS) + phrasing
    system = rng.choice(SYSTEMS) if rng.random() < P_SYSTEM else None
    while True:
        city = rng.choice(CITIES)
        result = None
        if rng.random() < P_NO_TOOLS:
            result = "no tools"
        elif rng.random() < P_RESULT:
            if tool == "get_weather":
                cond = rng.choice(sorted(SAY_WEATHER))
                result = (cond, rng.choice(SAY_WEATHER[cond][1]))
            else:
                result = (rng.randrange(24), rng.randrange(0, 60, 15))
        key = (tool, city, result)
        if held_out or result == "no tools" or key not in forbidden:
            break
    return chat(rng, ids, tool, question.format(c=city), city, result,
                system), key


# ---- the tokenizer -------------------------------------------------------

def train_tokenizer(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single="$A", pair="$A $B:1", special_tokens=[])
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # the tags are added tokens: matched whole, never learned from
    strip = SPECIALS + TOOL_TOKENS
    corpus = []
    for t in texts:
        for s in strip:
            t = t.replace(s, "\n")
        corpus.append(t)
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t in TOOL_TOKENS])
    return tok


# ---- the model -----------------------------------------------------------

def bf16_bytes(a):
    """float32 to bf16, rounded to nearest even, as little-endian bytes."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2").tobytes()


def write_safetensors(path, tensors):
    """tensors: name -> float32 array, stored as bf16 in name order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = bf16_bytes(tensors[name])
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def llama_weights(cfg, seed):
    """Random weights as transformers initializes a Llama: every linear
    layer and the embedding N(0, initializer_range) (the padding token's
    embedding row zero), the norms 1."""
    rng = np.random.default_rng(seed)
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    std = cfg["initializer_range"]

    def normal(*shape):
        return rng.normal(0.0, std, size=shape).astype(np.float32)

    w = {"model.embed_tokens.weight": normal(v, d)}
    w["model.embed_tokens.weight"][cfg["pad_token_id"]] = 0
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = normal(q, d)
        w[p + "self_attn.k_proj.weight"] = normal(kv, d)
        w[p + "self_attn.v_proj.weight"] = normal(kv, d)
        w[p + "self_attn.o_proj.weight"] = normal(d, q)
        w[p + "mlp.gate_proj.weight"] = normal(f, d)
        w[p + "mlp.up_proj.weight"] = normal(f, d)
        w[p + "mlp.down_proj.weight"] = normal(d, f)
        w[p + "input_layernorm.weight"] = np.ones(d, np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(d, np.float32)
    w["model.norm.weight"] = np.ones(d, np.float32)
    w["lm_head.weight"] = normal(v, d)
    return w


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False,
                               separators=(",", ":")) + "\n")


def check_transformers(rows):
    """transformers' apply_chat_template renders as above, with the
    arguments as objects and as the JSON strings of the data alike."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        print("transformers not installed: its check skipped")
        return
    fast = AutoTokenizer.from_pretrained(MODEL)
    tmpl = compile_template(TEMPLATE)
    for r in rows:
        want = render(tmpl, r["messages"], r.get("tools"))
        for msgs in (r["messages"], template_messages(r["messages"])):
            got = fast.apply_chat_template(msgs, tools=r.get("tools"),
                                           tokenize=False)
            assert got == want, (got, want)
        prompt = [m for m in r["messages"] if m["role"] != "assistant"][:2]
        got = fast.apply_chat_template(prompt, tools=r.get("tools"),
                                       add_generation_prompt=True,
                                       tokenize=False)
        assert got == render(tmpl, prompt, r.get("tools"), True)
        ids = fast.apply_chat_template(r["messages"], tools=r.get("tools"),
                                       tokenize=True, return_dict=False)
        assert ids == Tokenizer.from_file(
            os.path.join(MODEL, "tokenizer.json")).encode(want).ids
    print(f"transformers {__import__('transformers').__version__}: "
          f"apply_chat_template renders all {len(rows)} chats the same")


def main():
    rng = random.Random(SEED)
    ids = Ids(random.Random(SEED + 1))
    val, forbidden = [], set()
    for _ in range(N_VAL):
        row, key = draw(rng, ids, True, forbidden)
        val.append(row)
        if key[2] not in (None, "no tools"):
            forbidden.add(key)
    train = [draw(rng, ids, False, forbidden)[0] for _ in range(N_TRAIN)]

    tmpl = compile_template(TEMPLATE)
    texts = [render(tmpl, r["messages"], r.get("tools")) for r in train]
    tok = train_tokenizer(texts)

    os.makedirs(MODEL, exist_ok=True)
    for name in os.listdir(MODEL):
        os.remove(os.path.join(MODEL, name))
    tok.save(os.path.join(MODEL, "tokenizer.json"))
    eos, pad = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    write_json(os.path.join(MODEL, "tokenizer_config.json"), {
        "chat_template": TEMPLATE, "eos_token": "<|im_end|>",
        "model_max_length": 256, "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast"})
    cfg = {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": None, "dtype": "bfloat16",
        "eos_token_id": eos, "head_dim": 16, "hidden_act": "silu",
        "hidden_size": 64, "initializer_range": 0.02,
        "intermediate_size": 192, "max_position_embeddings": 256,
        "mlp_bias": False, "model_type": "llama", "num_attention_heads": 4,
        "num_hidden_layers": 2, "num_key_value_heads": 2,
        "pad_token_id": pad, "pretraining_tp": 1, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "tie_word_embeddings": False, "use_cache": True,
        "vocab_size": tok.get_vocab_size()}
    write_json(os.path.join(MODEL, "config.json"), cfg)
    write_json(os.path.join(MODEL, "generation_config.json"), {
        "do_sample": False, "eos_token_id": eos, "max_new_tokens": 48,
        "pad_token_id": pad})
    weights = llama_weights(cfg, SEED)
    write_safetensors(os.path.join(MODEL, "model.safetensors"), weights)

    write_jsonl(os.path.join(HERE, "train.jsonl"), train)
    write_jsonl(os.path.join(HERE, "val.jsonl"), val)

    # the lengths a job's seq_len must hold, and the trained tokens
    for name, rows in (("train", train), ("val", val)):
        lens, trained = [], 0
        for r in rows:
            text, spans = trained_spans(tmpl, r)
            enc = tok.encode(text)
            lens.append(len(enc.ids))
            trained += sum(any(a <= s < b for a, b in spans)
                           for s, _ in enc.offsets)
        print(f"{name}: {len(rows)} chats, {min(lens)}..{max(lens)} tokens "
              f"(mean {sum(lens) / len(lens):.1f}), {trained} trained")
    n = sum(x.size for x in weights.values())
    size = sum(os.path.getsize(os.path.join(MODEL, f))
               for f in os.listdir(MODEL))
    print(f"vocab {cfg['vocab_size']}, {n} parameters, model/ {size} bytes")
    if "--no-check" not in sys.argv:
        check_transformers(train[:50] + val)


if __name__ == "__main__":
    main()
