#!/usr/bin/env python3
"""Chats with tools rendered by the model's chat template and tokenized:
tacod's engine (bench_chat, a C driver reading the chats as a job's data,
single thread: render, tokenize, and find the trained tokens, which takes
further renders) against transformers' apply_chat_template(tokenize=True)
(jinja2 and Hugging Face tokenizers, single thread) over the same chats in
the same run. Prints chats/s of both and the ratio, and checks that both
gave the same ids for every chat.

    /opt/tacofix/bin/python bench/chat_template_bench.py [--build build]
        [--model examples/tools/model] [--chats 2000] [--repeat 3]

The chats (generated, seeded): OpenAI's format with tool definitions, a
system message or not, 1-4 user turns, assistant tool calls (their
arguments a JSON string, parsed for transformers as tacod and vLLM parse
them), tool results and answers. Needs the fixture environment
(tests/fixtures/requirements.txt: transformers, tokenizers, jinja2) and a
build with the bench_chat target. A timing, not a test.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from transformers import AutoTokenizer  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))

CITIES = ["Paris", "Lyon", "Oslo", "Lima", "Cairo", "Quito", "Hanoi", "Perth"]
WORDS = ("please tell me what the weather is like and whether I need an "
         "umbrella today or tomorrow in the city").split()
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city's name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The local time in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}}, "required": ["city"]}}},
]


def chat(rng, i):
    msgs = []
    if i % 2:
        msgs.append({"role": "system", "content": "You are a helpful assistant."})
    for turn in range(rng.randint(1, 4)):
        city = rng.choice(CITIES)
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16)))
        msgs.append({"role": "user", "content": f"{words} {city}?"})
        if rng.random() < 0.6:
            cid = f"call_{i}_{turn}"
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {
                    "name": "get_weather",
                    "arguments": json.dumps({"city": city, "unit": "celsius"})}}]})
            msgs.append({"role": "tool", "tool_call_id": cid,
                         "content": json.dumps({"temperature_c": rng.randint(-5, 35)})})
        msgs.append({"role": "assistant", "content": f"In {city} it is {rng.randint(-5, 35)} degrees."})
    return {"messages": msgs, "tools": TOOLS}


def for_template(c):
    """What tacod gives the template: arguments parsed, null keys dropped."""
    out = []
    for m in c["messages"]:
        m = {k: v for k, v in m.items() if v is not None and k != "weight"}
        if "tool_calls" in m:
            m["tool_calls"] = [dict(t, function=dict(t["function"], arguments=json.loads(
                t["function"]["arguments"]))) for t in m["tool_calls"]]
        out.append(m)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(ROOT, "examples", "tools", "model"))
    ap.add_argument("--chats", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    rng = random.Random(7)
    chats = [chat(rng, i) for i in range(a.chats)]
    tok = AutoTokenizer.from_pretrained(a.model)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "chats.jsonl")
        with open(path, "w") as f:
            f.writelines(json.dumps(c) + "\n" for c in chats)
        exe = os.path.join(a.build, "bench", "bench_chat")
        if not os.path.exists(exe):
            exe = os.path.join(a.build, "bench_chat")
        ours = json.loads(subprocess.run([exe, a.model, path, "--repeat", str(a.repeat)],
                                         check=True, capture_output=True, text=True).stdout)
        dump = subprocess.run([exe, a.model, path, "--dump"], check=True,
                              capture_output=True, text=True).stdout.splitlines()

    inputs = [(for_template(c), c["tools"]) for c in chats]
    best, ids = 1e30, None
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        got = [tok.apply_chat_template(m, tools=t, tokenize=True, return_dict=False)
               for m, t in inputs]
        best = min(best, time.perf_counter() - t0)
        ids = got
    ids = [x["input_ids"] if isinstance(x, dict) or hasattr(x, "keys") else x for x in ids]
    same = sum(1 for ours_ids, hf in zip(dump, ids)
               if [int(x) for x in ours_ids.split()] == list(hf))
    n = len(chats)
    print(f"model {a.model}: {n} chats with tools, {ours['tokens']} tokens "
          f"({ours['trained']} trained)")
    print(f"  tacod (render, tokenize, trained spans): {ours['seconds']:.3f} s, "
          f"{n / ours['seconds']:.0f} chats/s")
    print(f"  transformers apply_chat_template(tokenize=True): {best:.3f} s, "
          f"{n / best:.0f} chats/s")
    print(f"  ratio (transformers time / tacod time): {best / ours['seconds']:.2f}x")
    print(f"  same ids: {same} of {n}")
    return 0 if same == n else 1


if __name__ == "__main__":
    sys.exit(main())
