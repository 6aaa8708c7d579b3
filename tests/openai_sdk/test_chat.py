#!/usr/bin/env python3
"""tacod's chat completions through OpenAI's Python SDK, every reply
validated strictly (test_sdk.py's hooks and the SDK's own validation).

Starts the real tacod (TACO_BIN_DIR) with two users and a models directory
holding the demo model (tacod-demo, examples/demo) and a fixture model
without a tokenizer, then:
- the base model answers, streaming and not; the stream's chunks add up to
  the same greedy answer; a seed repeats its sampled answers; n choices;
- a fine-tune of the demo (the README tour's task) answers "4 numbers
  after 35" with "Sure: 36 37 38 39", where the base model does not; its
  checkpoint answers too; the other user cannot use it;
- hostile and unsupported requests get clear 400s (huge max_tokens, n,
  stop lists, a prompt past the context, unknown and unsupported
  parameters), foreign and unknown models 404, a user past its limit 429;
- kill -9 of the worker during a stream ends the stream with an error and
  the next request starts another; an idle worker exits after chat.idle_s;
- kill -9 of tacod during a stream: the client gets an error at once, not
  a hang, and the worker dies with it.
Run by CTest as `openai_chat`.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_sdk as sdk  # noqa: E402  (its Tacod, tokens and strict hooks)

ROOT = sdk.ROOT
DEMO = ROOT / "examples" / "demo"
sdk.REPLIES.append(("POST", r"/chat/completions", ChatCompletion, False))
ASK = [{"role": "user", "content": "4 numbers after 35"}]


def check(cond, what):
    sdk.check(cond, what)


def workers():
    """pids of this machine's chat workers (taco-train --serve)."""
    out = subprocess.run(["pgrep", "-f", "taco-train.*--serve"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def wait(what, f, timeout=60):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = f()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def strict_chunk(c, where):
    m = ChatCompletionChunk.model_validate(c.model_dump(exclude_unset=True))
    sdk.strict_model(m, where)
    check(c.object == "chat.completion.chunk", f"{where}: {c.object}")


def stream_text(client, **kw):
    """The streamed answer of choice 0, the chunks validated."""
    text, finish, usage = "", None, None
    for i, c in enumerate(client.chat.completions.create(stream=True, **kw)):
        strict_chunk(c, f"chunk {i}")
        if c.usage:
            usage = c.usage
        for ch in c.choices:
            if ch.index == 0:
                text += ch.delta.content or ""
                finish = ch.finish_reason or finish
    return text, finish, usage


def expect_error(call, status, code, what):
    try:
        call()
    except openai.APIStatusError as e:
        check(e.status_code == status, f"{what}: status {e.status_code}, want {status}: {e}")
        got = (e.body or {}).get("code") if isinstance(e.body, dict) else None
        check(got == code, f"{what}: code {got}, want {code}: {e.body}")
        return e
    raise AssertionError(f"{what}: no error")


def make_slow_model(d):
    """A Llama of the demo's tokenizer, wide enough that an answer takes
    seconds on the CPU (the demo's own takes milliseconds): zero matrices,
    the embeddings a constant and the head picking "o", so that every
    token streams a character and none ends the answer."""
    import struct
    d.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        (d / f).write_bytes((DEMO / "model" / f).read_bytes())
    V, H, I, L, heads, kv, hd = 389, 1024, 2816, 6, 16, 8, 64
    cfg = json.loads((DEMO / "model" / "config.json").read_text())
    cfg.update(hidden_size=H, intermediate_size=I, num_hidden_layers=L, num_attention_heads=heads,
               num_key_value_heads=kv, head_dim=hd, max_position_embeddings=1024)
    (d / "config.json").write_text(json.dumps(cfg))
    bf16 = {0.01: 0x3C24, 1.0: 0x3F80, 0.1: 0x3DCD}
    tensors = {"model.embed_tokens.weight": ([V, H], struct.pack("<H", bf16[0.01]) * (V * H)),
               "model.norm.weight": ([H], struct.pack("<H", bf16[1.0]) * H)}
    head = bytearray(V * H * 2)
    head[81 * H * 2:82 * H * 2] = struct.pack("<H", bf16[0.1]) * H  # "o"
    tensors["lm_head.weight"] = ([V, H], bytes(head))
    for i in range(L):
        p = f"model.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm"):
            tensors[p + n + ".weight"] = ([H], struct.pack("<H", bf16[1.0]) * H)
        for n, shape in (("self_attn.q_proj", [heads * hd, H]), ("self_attn.k_proj", [kv * hd, H]),
                         ("self_attn.v_proj", [kv * hd, H]), ("self_attn.o_proj", [H, heads * hd]),
                         ("mlp.gate_proj", [I, H]), ("mlp.up_proj", [I, H]), ("mlp.down_proj", [H, I])):
            tensors[p + n + ".weight"] = (shape, bytes(shape[0] * shape[1] * 2))
    header, off = {}, 0
    for n, (shape, data) in tensors.items():
        header[n] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for n, (shape, data) in tensors.items():
            f.write(data)


def start(bin_dir):
    models = Path(tempfile.mkdtemp(prefix="chat-models-"))
    (models / "tacod-demo").symlink_to(DEMO / "model")
    make_slow_model(models / "tacod-slow")
    (models / "llama_gqa").symlink_to(sdk.FIXTURES / "models" / "llama_gqa")
    daemon = sdk.Tacod(bin_dir, {"models_dir": str(models), "chat": {
        "idle_s": 4, "wait_s": 5, "max_requests_per_user": 2, "rows": 4}})
    return daemon, models


def run(base_url, daemon):
    steps = []
    client = openai.OpenAI(base_url=base_url, api_key=sdk.TOKEN, max_retries=0, timeout=120,
                           _strict_response_validation=True, http_client=sdk.strict_http())
    other = openai.OpenAI(base_url=base_url, api_key=sdk.OTHER_TOKEN, max_retries=0, timeout=60,
                          http_client=sdk.strict_http())

    # ---- the base model
    r = client.chat.completions.create(model="tacod-demo", messages=ASK, max_tokens=12, temperature=0)
    check(r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == "tacod-demo", f"{r}")
    check(len(r.choices) == 1 and r.choices[0].message.role == "assistant", f"{r.choices}")
    check(r.choices[0].finish_reason in ("stop", "length"), f"{r.choices[0]}")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens > 0, f"{r.usage}")
    base = r.choices[0].message.content
    text, finish, usage = stream_text(client, model="tacod-demo", messages=ASK, max_tokens=12, temperature=0,
                                      stream_options={"include_usage": True})
    check(text == base and finish == r.choices[0].finish_reason, f"stream {text!r} against {base!r}")
    check(usage and usage.completion_tokens == r.usage.completion_tokens, f"stream usage {usage}")
    steps.append(f"base model, streaming and not ({base!r})")

    kw = dict(model="tacod-demo", messages=ASK, max_tokens=10, temperature=1.0, top_p=0.9, seed=11, n=3)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    check([c.message.content for c in a.choices] == [c.message.content for c in b.choices], "a seed repeats")
    check(len(a.choices) == 3 and [c.index for c in a.choices] == [0, 1, 2], f"{a.choices}")
    steps.append("seeded sampling repeats, n = 3")

    # ---- hostile and unsupported requests, unknown models
    long = " ".join(["numbers"] * 400)
    for what, call, status, code in [
        ("max_tokens 5000", lambda: client.chat.completions.create(
            model="tacod-demo", messages=ASK, max_tokens=5000), 400, "invalid_value"),
        ("n 9", lambda: client.chat.completions.create(model="tacod-demo", messages=ASK, n=9), 400, "invalid_value"),
        ("n 5 past chat.rows", lambda: client.chat.completions.create(
            model="tacod-demo", messages=ASK, n=5), 400, "invalid_value"),
        ("5 stop strings", lambda: client.chat.completions.create(
            model="tacod-demo", messages=ASK, stop=["a", "b", "c", "d", "e"]), 400, "invalid_value"),
        ("a prompt past the context", lambda: client.chat.completions.create(
            model="tacod-demo", messages=[{"role": "user", "content": long}]), 400, "context_length_exceeded"),
        ("frequency_penalty", lambda: client.chat.completions.create(
            model="tacod-demo", messages=ASK, frequency_penalty=0.5), 400, "unsupported_parameter"),
        ("an unknown parameter", lambda: client.chat.completions.create(
            model="tacod-demo", messages=ASK, extra_body={"bogus": 1}), 400, "unknown_parameter"),
        ("an unknown model", lambda: client.chat.completions.create(model="nope", messages=ASK), 404,
         "model_not_found"),
        ("a model without a tokenizer", lambda: client.chat.completions.create(
            model="llama_gqa", messages=ASK), 400, "model_not_supported"),
    ]:
        expect_error(call, status, code, what)
    steps.append("hostile requests: clear 400s and 404s")

    # ---- a fine-tune of the demo answers what the base model cannot
    train = client.files.create(file=open(DEMO / "train.jsonl", "rb"), purpose="fine-tune")
    job = client.fine_tuning.jobs.create(
        model="tacod-demo", training_file=train.id, suffix="chat", hyperparameters={"batch_size": 16},
        extra_body={"taco": {"steps": 500, "lr": 0.008, "seq_len": 32, "checkpoint_every": 500}})
    job = wait("the fine-tune", lambda: (lambda j: j if j.status in ("succeeded", "failed") else None)(
        client.fine_tuning.jobs.retrieve(job.id)), timeout=300)
    check(job.status == "succeeded", f"the fine-tune: {job.status} {job.error}")
    ft = job.fine_tuned_model
    r = client.chat.completions.create(model=ft, messages=ASK, temperature=0)
    check(r.choices[0].message.content == "Sure: 36 37 38 39" and r.choices[0].finish_reason == "stop",
          f"the fine-tuned model answers {r.choices[0].message.content!r}")
    check(base != "Sure: 36 37 38 39", "the base model already knew")
    ckpt = client.fine_tuning.jobs.checkpoints.list(job.id).data[0].fine_tuned_model_checkpoint
    r = client.chat.completions.create(model=ckpt, messages=ASK, temperature=0, max_tokens=16)
    check(r.model == ckpt and r.choices[0].message.content, f"the checkpoint answers {r}")
    expect_error(lambda: other.chat.completions.create(model=ft, messages=ASK), 404, "model_not_found",
                 "another user's fine-tuned model")
    steps.append(f"fine-tuned model answers {r.choices[0].message.content!r} (its checkpoint too)")

    # ---- at most 2 requests of a user at once
    errs, results = [], []

    def long_stream():
        try:
            results.append(stream_text(client, model="tacod-slow", messages=ASK, max_tokens=60,
                                       temperature=0)[0])
        except Exception as e:  # noqa: BLE001  (reported below)
            errs.append(e)

    ts = [threading.Thread(target=long_stream) for _ in range(2)]
    for t in ts:
        t.start()
    time.sleep(0.3)
    expect_error(lambda: client.chat.completions.create(model=ft, messages=ASK, max_tokens=4), 429,
                 "too_many_requests", "a third request of one user")
    for t in ts:
        t.join()
    check(not errs and results == ["o" * 60] * 2, f"the two requests: {errs} {results}")
    steps.append("a user's third request at once: 429")

    # ---- kill -9 of the worker during a stream
    pids = wait("a worker", workers)
    stream = client.chat.completions.create(model="tacod-slow", messages=ASK, max_tokens=400, stream=True)
    got_error = None
    try:
        for i, c in enumerate(stream):
            if i == 2:
                pids = workers()
                for p in pids:
                    os.kill(p, signal.SIGKILL)
    except openai.APIError as e:
        got_error = e
    check(got_error is not None and "worker" in str(got_error), f"the stream after kill -9: {got_error!r}")
    r = client.chat.completions.create(model=ft, messages=ASK, temperature=0)
    check(r.choices[0].message.content == "Sure: 36 37 38 39", "a new worker answers")
    steps.append(f"kill -9 of worker {pids}: the stream's error, then a new worker")

    # ---- idle workers exit
    wait("the idle worker to exit", lambda: not workers(), timeout=30)
    steps.append("an idle worker exits after chat.idle_s")

    # ---- kill -9 of tacod during a stream
    stream = client.chat.completions.create(model="tacod-slow", messages=ASK, max_tokens=400, stream=True)
    t0, err = time.monotonic(), None
    try:
        for i, c in enumerate(stream):
            if i == 2:
                daemon.proc.send_signal(signal.SIGKILL)
    except (openai.APIError, Exception) as e:  # noqa: BLE001  (a connection error of any kind)
        err = e
    check(err is not None and time.monotonic() - t0 < 30, f"the client after kill -9 of tacod: {err!r}")
    wait("the worker to die with tacod", lambda: not workers(), timeout=15)
    steps.append(f"kill -9 of tacod: the client's {type(err).__name__}, the worker gone")
    return steps


def main():
    bin_dir = os.environ.get("TACO_BIN_DIR")
    if not bin_dir:
        print("test_chat.py: TACO_BIN_DIR (the build directory) is not set", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    daemon, models = start(bin_dir)
    try:
        steps = run(f"http://127.0.0.1:{daemon.port}/v1", daemon)
    except Exception:
        print("---- tacod's log\n" + daemon.log_tail(), file=sys.stderr)
        raise
    finally:
        daemon.stop()
        for p in workers():
            os.kill(p, signal.SIGKILL)
        shutil.rmtree(models, ignore_errors=True)
    for s in steps:
        print(f"ok  {s}")
    print(f"openai_chat: {len(steps)} passed, 0 failed ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
