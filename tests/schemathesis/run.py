#!/usr/bin/env python3
"""schemathesis against the spec that tacod serves (GET /v1/openapi.yaml).

Starts the real tacod (TACO_BIN_DIR) on a free loopback port with a fresh
state directory, the fixture models, a dataset root and a tokens file (a
user and an admin), so auth is on and the auth checks mean something. It
lays out what the run starts from (lay_out: a finished job with two
checkpoints and a model, paused jobs, an upload no request of the run can
delete), then runs schemathesis (pinned with the openai SDK in
tests/openai_sdk/requirements.txt, the venv build-venv/sdk) as the user:
every check (--checks all), every phase (examples, coverage, fuzzing,
stateful through the spec's links), a fixed seed, a fixed number of cases
per operation and a bound on each response's time, with hooks.py for the
runtime rules of a create that no schema states. Any failure, error or
warning fails the test, and so does a tacod that did not survive the run
or does not stop cleanly. Run by CTest as `schemathesis`.

  TACO_BIN_DIR=build build-venv/sdk/bin/python tests/schemathesis/run.py

Environment: TACO_ST_MAX_EXAMPLES (cases per operation, default 400),
TACO_ST_SEED (default 1), TACO_ST_MAX_RESPONSE_S (the most one reply may
take, default 5; CTest gives 20 under the sanitizers), TACO_ST_ARGS (more options for
`schemathesis run`, e.g. --continue-on-failure), TACO_ST_KEEP (keep the
work directory, with the NDJSON report, of a failed run),
TACO_ST_WORKERS (default 1: one worker keeps the order of the requests,
so a seed replays the same run; and with two, Hypothesis's calls of
ast.parse from two threads fail now and then inside schemathesis on
Python 3.11: "AST constructor recursion depth mismatch").
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TRAIN = FIXTURES / "data" / "count_train.jsonl"
HERE = Path(__file__).resolve().parent
TOKEN = "tacod-schemathesis-user"
ADMIN_TOKEN = "tacod-schemathesis-admin"
MODEL = "llama_gqa"
# Preference pairs (OpenAI's DPO format): the data of a generated dpo
# create, which supervised examples are not.
PAIRS = b"".join(
    json.dumps(
        {
            "input": {"messages": [{"role": "user", "content": q}]},
            "preferred_output": [{"role": "assistant", "content": good}],
            "non_preferred_output": [{"role": "assistant", "content": bad}],
        }
    ).encode()
    + b"\n"
    for q, good, bad in (("2+2?", "4", "5"), ("Hi", "Hello!", "Go away."), ("Sky?", "Blue.", "Green."))
)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Tacod:
    def __init__(self, bin_dir, work):
        self.dir = work
        self.log = open(self.dir / "tacod.log", "w+b")
        tokens = self.dir / "tokens"
        tokens.write_text(
            f"{hashlib.sha256(TOKEN.encode()).hexdigest()} st-user user\n"
            f"{hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()} st-admin admin\n"
        )
        (self.dir / "data").mkdir()
        shutil.copy(TRAIN, self.dir / "data" / "train.jsonl")
        (self.dir / "data" / "pairs.jsonl").write_bytes(PAIRS)
        self.proc = None
        for _ in range(3):  # another process may take the port first
            self.port = free_port()
            cfg = {
                "listen": f"127.0.0.1:{self.port}",
                "state_dir": str(self.dir / "state"),
                "models_dir": str(FIXTURES / "models"),
                "taco_train": str(Path(bin_dir) / "taco-train"),
                "tokens_file": str(tokens),
                "dataset_roots": [str(self.dir / "data")],
                "device_memory": "1GB",
                "cancel_timeout_s": 5,
                "max_retries": 0,
                "limits": {
                    "max_queued_jobs_per_user": 1000,
                    "max_running_jobs": 1,
                    "max_upload_bytes": 1048576,
                },
            }
            (self.dir / "tacod.json").write_text(json.dumps(cfg))
            self.proc = subprocess.Popen(
                [str(Path(bin_dir) / "tacod"), "--config", str(self.dir / "tacod.json")],
                stdout=self.log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS="1"),
            )
            if self.wait_healthy():
                return
            self.proc.kill()
            self.proc.wait()
        raise RuntimeError("tacod did not answer /healthz:\n" + self.log_tail())

    def wait_healthy(self):
        url = f"http://127.0.0.1:{self.port}/healthz"
        for _ in range(300):
            if self.proc.poll() is not None:
                return False
            try:
                req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
                with urllib.request.urlopen(req, timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def log_tail(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def stop(self):
        """SIGTERM; True when tacod was still alive and exited 0."""
        alive = self.proc.poll() is None
        if alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return False
        return alive and self.proc.returncode == 0


class Api:
    """A few plain calls, to lay out the objects the run starts from."""

    def __init__(self, base, token):
        self.base, self.token = base, token

    def call(self, method, path, body=None, data=None, ctype="application/json"):
        headers = {"Authorization": f"Bearer {self.token}"}
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = ctype
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def upload(self, name, content):
        b = "tacod-st-boundary"
        data = (
            f"--{b}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nfine-tune\r\n"
            f"--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode() + content + f"\r\n--{b}--\r\n".encode()
        return self.call("POST", "/v1/files", data=data, ctype=f"multipart/form-data; boundary={b}")["id"]

    def wait(self, job, statuses, deadline=120):
        t0 = time.monotonic()
        while True:
            j = self.call("GET", f"/v1/fine_tuning/jobs/{job}")
            if j["status"] in statuses:
                return j
            if time.monotonic() - t0 > deadline:
                raise RuntimeError(f"{job} is {j['status']}, not {statuses}: {j.get('error')}")
            time.sleep(0.1)


    def paused_job(self, training_file):
        """A long job, paused once it has left validating_files."""
        job = self.call(
            "POST",
            "/v1/fine_tuning/jobs",
            {"model": MODEL, "training_file": training_file, "taco": {"steps": 1000000, "seq_len": 24}},
        )["id"]
        self.wait(job, ("queued", "running"))
        self.call("POST", f"/v1/fine_tuning/jobs/{job}/pause")
        self.wait(job, ("paused",))
        return job


def lay_out(base, work):
    """The objects the run starts from; the environment and config of schemathesis."""
    user, admin = Api(base, TOKEN), Api(base, ADMIN_TOKEN)
    data = TRAIN.read_bytes()
    # A finished job of the user with two checkpoints and a model: the
    # downloads have something to serve.
    f_done = user.upload("done.jsonl", data)
    done = user.call(
        "POST",
        "/v1/fine_tuning/jobs",
        {
            "model": MODEL,
            "training_file": f_done,
            "taco": {"steps": 4, "seq_len": 24, "checkpoint_every": 2, "keep_checkpoints": 2},
        },
    )["id"]
    j = user.wait(done, ("succeeded", "failed", "cancelled"))
    if j["status"] != "succeeded":
        raise RuntimeError(f"the set-up job {done} ended {j['status']}: {j.get('error')}")
    # A second finished job of the user, whose fine-tuned model is the one
    # DELETE /v1/models/{model} deletes: the fuzzer would otherwise take
    # the first job's (from a GET's reply) and leave its downloads 404.
    spare = user.call(
        "POST", "/v1/fine_tuning/jobs", {"model": MODEL, "training_file": f_done, "taco": {"steps": 1, "seq_len": 24}}
    )["id"]
    j_spare = user.wait(spare, ("succeeded", "failed", "cancelled"))
    if j_spare["status"] != "succeeded":
        raise RuntimeError(f"the set-up job {spare} ended {j_spare['status']}: {j_spare.get('error')}")
    # Two GGUF files of the done job for the GGUF routes to show,
    # download and delete (the fixture model has no tokenizer.json, so a
    # conversion of it fails, as it should: test_tacod_gguf converts the
    # demo model for real). Written where a conversion leaves its file.
    gguf = work / "state" / "jobs" / done / "out" / "gguf"
    gguf.mkdir(parents=True)
    for name in ("model-q8_0.gguf", "model-f16.gguf"):
        (gguf / name).write_bytes(b"GGUF" + bytes(60))
    models = [MODEL, j["fine_tuned_model"]]
    ckpts = [c["id"] for c in user.call("GET", f"/v1/fine_tuning/jobs/{done}/checkpoints")["data"]]
    if len(ckpts) != 2:
        raise RuntimeError(f"the set-up job {done} has checkpoints {ckpts}")
    # The training file of every generated create: an upload that the run
    # cannot delete (an admin's paused job uses it, and the user sees no
    # job of the admin) and a path under a dataset root.
    f_keep = user.upload("train.jsonl", data)
    # The pairs of a generated dpo create: no link of the spec leads a
    # delete to this id (only the list shows it), and its path stays.
    f_pairs = user.upload("pairs.jsonl", PAIRS)
    admin.paused_job(f_keep)
    # Jobs of the user that have not finished, all paused (so none trains
    # while the run goes on): cancel, pause and resume act on them.
    live = [user.paused_job(f_keep) for _ in range(4)]
    env = {
        "TACO_ST_MODELS": MODEL,
        "TACO_ST_FILES": ",".join([f_keep, str(work / "data" / "train.jsonl")]),
        "TACO_ST_PAIR_FILES": ",".join([f_pairs, str(work / "data" / "pairs.jsonl")]),
        "TACO_ST_MAX_TOKENS": "4096",
    }
    # Half the {id} paths (in every phase that draws values) name these
    # objects instead of a random id, so those operations reach real
    # objects; the stateful phase follows the spec's links besides.
    config = f"""
hooks = {json.dumps(str(HERE / "hooks.py"))}

# An event stream (GET .../events?stream=true) is live until its job has
# finished, and the generated jobs train for up to 10^9 steps: reading
# one to its end would only wait out the request timeout. The first
# events, those of a job's first moments, are read and checked.
max-stream-events = 3

[warnings]
fail-on = true


# The stateful phase follows the links the spec declares. The links it
# would infer besides include POST /v1/fine_tuning/jobs to the job's
# model/content, which is 404 until the job has succeeded (a model that
# does not exist yet, not a created resource that went missing).
[phases.stateful.inference]
algorithms = []

[dictionaries.files]
values = {json.dumps([f_done])}
[dictionaries.jobs]
values = {json.dumps([done] + live)}
[dictionaries.live]
values = {json.dumps(live)}
[dictionaries.checkpoints]
values = {json.dumps(ckpts + [c.rsplit("-", 1)[1] for c in ckpts])}
[dictionaries.models]
values = {json.dumps(models)}
[dictionaries.done]
values = {json.dumps([done])}
[dictionaries.gguf_names]
values = ["model-q8_0.gguf"]
[dictionaries.gguf_deletable]
values = ["model-f16.gguf"]
[dictionaries.deletable]
values = {json.dumps([j_spare["fine_tuned_model"]])}

# The models: half the retrieves name real ones; every delete names the
# spare job's fine-tuned model (200 once, then 404: deleted).
[[operations]]
include-operation-id = "retrieveModel"
parameters = {{ "path.model" = {{ dictionary = "models", probability = 0.5 }} }}
[[operations]]
include-operation-id = "deleteModel"
parameters = {{ "path.model" = {{ dictionary = "deletable", probability = 1.0 }} }}

# Cancelling a job that has finished is 400 `job_finished`, as OpenAI's
# API answers it (the SDK raises BadRequestError; tests/openai_sdk checks
# it): a state of the job, not a fault of the request, so a schema-valid
# cancel may get it. The cancel's other 400, an id over 63 bytes, is not
# schema-valid, so nothing else is let through here.
[[operations]]
include-operation-id = "cancelFineTuningJob"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]
parameters = {{ "path.id" = {{ dictionary = "live", probability = 0.5 }} }}

# OpenAI's paths that tacod does not serve (checkpoint permissions,
# graders) answer every request 404 `not_supported`: that 404 is what they
# do, not test data the run lacks, and a valid request is refused as an
# invalid one is. So the two warnings about that, missing_test_data and
# validation_mismatch (schemathesis tests both under one condition), are
# left out for them, and only those.
[[operations]]
include-path-regex = "^/v1/fine_tuning/(checkpoints|alpha)/"
warnings = {{ display = ["missing_auth", "base_url_mismatch", "missing_deserializer", "unused_openapi_auth", "unsupported_regex", "method_not_allowed", "constants_extraction", "unmatched_filter", "unresolvable_reference", "rate_limited", "dictionary_mismatch", "timeout_units"], fail-on = true }}

[[operations]]
include-path-regex = "^/v1/files/[{{]id[}}]"
parameters = {{ "path.id" = {{ dictionary = "files", probability = 0.5 }} }}

[[operations]]
include-operation-id = "pauseFineTuningJob"
parameters = {{ "path.id" = {{ dictionary = "live", probability = 0.5 }} }}

[[operations]]
include-operation-id = "resumeFineTuningJob"
parameters = {{ "path.id" = {{ dictionary = "live", probability = 0.5 }} }}

[[operations]]
include-path-regex = "^/v1/fine_tuning/jobs/[{{]id[}}](/(events|checkpoints.*|model/content))?$"
parameters = {{ "path.id" = {{ dictionary = "jobs", probability = 0.5 }}, "path.checkpoint" = {{ dictionary = "checkpoints", probability = 0.5 }} }}

# The GGUF routes: the done job's files (one shown and downloaded, one
# deleted: 200 once, then 404).
[[operations]]
include-path-regex = "^/v1/fine_tuning/jobs/[{{]id[}}]/gguf$"
parameters = {{ "path.id" = {{ dictionary = "jobs", probability = 0.5 }} }}
[[operations]]
include-path-regex = "^/v1/fine_tuning/jobs/[{{]id[}}]/gguf/[{{]name[}}](/content)?$"
include-method = ["GET"]
parameters = {{ "path.id" = {{ dictionary = "done", probability = 0.5 }}, "path.name" = {{ dictionary = "gguf_names", probability = 0.5 }} }}
[[operations]]
include-operation-id = "deleteFineTuningJobGguf"
parameters = {{ "path.id" = {{ dictionary = "done", probability = 0.5 }}, "path.name" = {{ dictionary = "gguf_deletable", probability = 1.0 }} }}
"""
    (work / "schemathesis.toml").write_text(config)
    return env


def main():
    bin_dir = os.environ.get("TACO_BIN_DIR")
    if not bin_dir:
        print("run.py: TACO_BIN_DIR (the build directory) is not set", file=sys.stderr)
        return 2
    st = Path(sys.executable).parent / "schemathesis"
    max_examples = os.environ.get("TACO_ST_MAX_EXAMPLES", "400")
    seed = os.environ.get("TACO_ST_SEED", "1")
    workers = os.environ.get("TACO_ST_WORKERS", "1")
    work = Path(tempfile.mkdtemp(prefix="tacod-st-"))
    t0 = time.monotonic()
    daemon = Tacod(bin_dir, work)
    base = f"http://127.0.0.1:{daemon.port}"
    ok = False
    try:
        env = dict(os.environ, **lay_out(base, work))
        cmd = [
            str(st),
            "--config-file",
            str(work / "schemathesis.toml"),
            "run",
            f"{base}/v1/openapi.yaml",
            "--url",
            base,
            "--header",
            f"Authorization: Bearer {TOKEN}",
            "--checks",
            "all",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--seed",
            seed,
            "--max-examples",
            max_examples,
            "--workers",
            workers,
            "--request-timeout",
            "10",
            "--max-response-time",
            os.environ.get("TACO_ST_MAX_RESPONSE_S", "5"),
            "--generation-database",
            "none",
            # POST /v1/chat/completions is left out: its request has rules
            # across fields that no JSON Schema states (max_tokens and
            # max_completion_tokens equal, stream_options only with
            # stream, fields by a message's role, lengths in bytes), so
            # most generated requests are its 400s; and generating its
            # nested messages doubled this run's time. Its parser is
            # tested field by field and limit by limit
            # (tests/test_chat_request.c) and fuzzed (fuzz_chat_request),
            # its replies validated by the SDK's types
            # (tests/openai_sdk/test_chat.py).
            "--exclude-operation-id",
            "createChatCompletion",
            "--no-color",
            *os.environ.get("TACO_ST_ARGS", "").split(),
            "--report",
            "ndjson",
            "--report-dir",
            str(work / "report"),
        ]
        print("+ " + " ".join(cmd), flush=True)
        rc = subprocess.call(cmd, cwd=work, env=env)
        ok = rc == 0
    finally:
        clean = daemon.stop()
        if not clean:
            print("schemathesis: tacod did not survive the run or did not stop cleanly", file=sys.stderr)
            ok = False
        if not ok:
            print("---- tacod's log\n" + daemon.log_tail(), file=sys.stderr)
        if ok or not os.environ.get("TACO_ST_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    print(f"schemathesis: {'passed' if ok else 'FAILED'} ({time.monotonic() - t0:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
