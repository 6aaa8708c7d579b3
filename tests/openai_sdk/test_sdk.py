#!/usr/bin/env python3
"""tacod through OpenAI's official Python SDK (tests/openai_sdk/requirements.txt).

Starts the real tacod binary (TACO_BIN_DIR) on a free loopback port with a
fresh state directory and the fixture models, then talks to it with nothing
but the SDK: models, files, a fine-tuning job to the end, list pagination,
events, checkpoints, pause / resume / cancel and errors.

The client validates every response strictly against the SDK's types
(_strict_response_validation=True): without it the SDK accepts any JSON and
a field of the wrong type or a missing one would go unnoticed. One gap is
the SDK's, not tacod's: its FineTuningJob.status does not list "paused", so
the calls that return a paused job go through a default (lenient) client,
as a user's would, and the test checks the status it carries.

Beyond the SDK's own validation, every JSON reply either client gets goes
through strict_reply (an httpx response hook): the object, each item of a
list page and each nested object through the SDK's pydantic model of its
route, with no required field missing, every field of the main objects
present (null for what tacod does not know), and no field beyond the SDK's
but tacod's documented extensions (EXTENSIONS, which must be what
api/openapi.yaml marks `x-tacod-extension`) and OpenAI's list fields that
the SDK's page classes do not declare; an error reply is exactly OpenAI's
error object.

Retries are off (max_retries=0): the SDK retries 409 and 5xx by default,
which would hide an error behind a delay. Run by CTest as `openai_sdk`.
"""

import csv
import hashlib
import io
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import httpx
import openai
import pydantic
import yaml
from openai.types import FileDeleted, FileObject, Model, ModelDeleted
from openai.types.fine_tuning import FineTuningJob, FineTuningJobEvent
from openai.types.fine_tuning.jobs import FineTuningJobCheckpoint

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TRAIN = FIXTURES / "data" / "count_train.jsonl"
DEADLINE_S = 120  # for a job to reach a status
# two users: the test's, and another who must see none of its objects
TOKEN, OTHER_TOKEN = "sdk-token-alice", "sdk-token-carol"
TOKENS = {TOKEN: "alice", OTHER_TOKEN: "carol"}


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Tacod:
    """The real binary, in the foreground of this test, with its own state."""

    def __init__(self, bin_dir, extra=None):
        """extra: fields over the config's (test_chat.py's models and chat)."""
        self.dir = Path(tempfile.mkdtemp(prefix="tacod-sdk-"))
        self.log = open(self.dir / "tacod.log", "w+b")
        self.proc = None
        for _ in range(3):  # another process may take the port first
            self.port = free_port()
            tokens = self.dir / "tokens"
            tokens.write_text(
                "".join(f"{hashlib.sha256(t.encode()).hexdigest()} {u} user\n" for t, u in TOKENS.items())
            )
            cfg = {
                "listen": f"127.0.0.1:{self.port}",
                "tokens_file": str(tokens),
                "state_dir": str(self.dir / "state"),
                "models_dir": str(FIXTURES / "models"),
                "taco_train": str(Path(bin_dir) / "taco-train"),
                "device_memory": "8GB",
                "cancel_timeout_s": 30,
                **(extra or {}),
            }
            (self.dir / "tacod.json").write_text(json.dumps(cfg))
            self.proc = subprocess.Popen(
                [str(Path(bin_dir) / "tacod"), "--config", str(self.dir / "tacod.json")],
                stdout=self.log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, OMP_WAIT_POLICY="passive"),
            )
            if self.wait_healthy():
                return
            self.proc.kill()
            self.proc.wait()
        raise RuntimeError("tacod did not answer /healthz:\n" + self.log_tail())

    def wait_healthy(self):
        url = f"http://127.0.0.1:{self.port}/healthz"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
        for _ in range(100):
            if self.proc.poll() is not None:
                return False
            try:
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
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


# ---- strict validation of every reply

# tacod's extension fields, by the SDK model they extend: api/openapi.yaml
# marks exactly these `x-tacod-extension` (check_extensions_match_spec).
EXTENSIONS = {
    "FineTuningJob": {"user_provided_suffix", "taco", "planned_memory_bytes", "measured_peak_memory_bytes"},
    "Model": {"root", "parent"},
}
# The spec's schema of each SDK model above.
SPEC_SCHEMAS = {"FineTuningJob": "FineTuningJob", "FileObject": "File", "FineTuningJobEvent": "FineTuningJobEvent",
                "FineTuningJobCheckpoint": "FineTuningJobCheckpoint", "Model": "Model"}
# The objects tacod sends whole: every field of the SDK's model is there.
COMPLETE = {"FineTuningJob", "FileObject", "FineTuningJobEvent", "FineTuningJobCheckpoint", "Model",
            "FileDeleted", "ModelDeleted"}
# OpenAI's list object: what its pages carry (the SDK's page classes
# declare only data and has_more).
PAGE_KEYS = {"object", "data", "has_more", "first_id", "last_id"}
ERROR_KEYS = {"message", "type", "param", "code"}
ID = r"[A-Za-z0-9_.:%-]+"
# (method, path under /v1, the SDK model of the reply, is it a list page)
REPLIES = [
    ("GET", r"/models", Model, True),
    ("GET", rf"/models/{ID}", Model, False),
    ("DELETE", rf"/models/{ID}", ModelDeleted, False),
    ("GET", r"/files", FileObject, True),
    ("POST", r"/files", FileObject, False),
    ("GET", rf"/files/{ID}", FileObject, False),
    ("DELETE", rf"/files/{ID}", FileDeleted, False),
    ("GET", r"/fine_tuning/jobs", FineTuningJob, True),
    ("POST", r"/fine_tuning/jobs", FineTuningJob, False),
    ("GET", rf"/fine_tuning/jobs/{ID}", FineTuningJob, False),
    ("POST", rf"/fine_tuning/jobs/{ID}/(cancel|pause|resume)", FineTuningJob, False),
    ("GET", rf"/fine_tuning/jobs/{ID}/events", FineTuningJobEvent, True),
    ("GET", rf"/fine_tuning/jobs/{ID}/checkpoints", FineTuningJobCheckpoint, True),
]
SEEN = Counter()  # replies validated, by model (and "error")


def strict_model(m, where):
    """An SDK model instance (and the models inside it): no required field
    missing, every field of a COMPLETE one present, nothing beyond the
    SDK's fields but EXTENSIONS."""
    name = type(m).__name__
    fields = type(m).model_fields
    missing = [f for f, info in fields.items() if info.is_required() and f not in m.model_fields_set]
    check(not missing, f"{where}: {name} lacks required {missing}")
    if name in COMPLETE:
        absent = sorted(set(fields) - m.model_fields_set)
        check(not absent, f"{where}: {name} lacks {absent} (null is how tacod says it does not know)")
    extra = set(m.model_extra or {}) - EXTENSIONS.get(name, set())
    check(not extra, f"{where}: {name} has fields beyond the SDK's and tacod's extensions: {sorted(extra)}")
    for f in fields:
        v = getattr(m, f)
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, pydantic.BaseModel):
                strict_model(x, f"{where}.{f}")


def strict_object(model, data, where):
    check(isinstance(data, dict), f"{where}: not an object: {data!r}")
    if model is FineTuningJob and data.get("status") == "paused":
        # tacod's status (api/openapi.yaml), which the SDK's Literal lacks
        data = dict(data, status="running")
    try:
        m = model.model_validate(data)
    except pydantic.ValidationError as e:
        raise AssertionError(f"{where}: not a valid {model.__name__}: {e}") from None
    strict_model(m, where)
    SEEN[model.__name__] += 1


def strict_body(method, path, status, body):
    where = f"{method} {path} ({status})"
    if status >= 400:
        err = body.get("error") if isinstance(body, dict) else None
        check(isinstance(body, dict) and set(body) == {"error"}, f"{where}: not an error envelope: {body}")
        check(isinstance(err, dict) and set(err) == ERROR_KEYS, f"{where}: error fields {sorted(err or {})}")
        check(isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str), f"{where}: {err}")
        check(all(err[k] is None or isinstance(err[k], str) for k in ("param", "code")), f"{where}: {err}")
        SEEN["error"] += 1
        return
    for m, pattern, model, page in REPLIES:
        if m == method and re.fullmatch(pattern, path):
            break
    else:
        raise AssertionError(f"{where}: no SDK type known for this reply")
    if not page:
        strict_object(model, body, where)
        return
    check(isinstance(body, dict) and set(body) == PAGE_KEYS, f"{where}: list fields {sorted(body)}")
    data = body["data"]
    check(body["object"] == "list" and isinstance(data, list) and isinstance(body["has_more"], bool), where)
    ids = [x.get("id") if isinstance(x, dict) else None for x in data]
    check(body["first_id"] == (ids[0] if ids else None), f"{where}: first_id {body['first_id']} of {ids}")
    check(body["last_id"] == (ids[-1] if ids else None), f"{where}: last_id {body['last_id']} of {ids}")
    check(len(set(ids)) == len(ids), f"{where}: an id twice in one page: {ids}")
    for i, x in enumerate(data):
        strict_object(model, x, f"{where} data[{i}]")


def strict_reply(response):
    """httpx's response hook: every JSON reply through strict_body."""
    if not response.headers.get("content-type", "").startswith("application/json"):
        return
    response.read()
    path = response.request.url.path
    check(path.startswith("/v1/"), f"a reply from outside /v1: {path}")
    strict_body(response.request.method, path[3:], response.status_code, response.json())


def strict_http():
    return httpx.Client(event_hooks={"response": [strict_reply]})


def check_extensions_match_spec():
    """EXTENSIONS is what api/openapi.yaml marks x-tacod-extension."""
    schemas = yaml.safe_load((ROOT / "api" / "openapi.yaml").read_text())["components"]["schemas"]
    for model, schema in SPEC_SCHEMAS.items():
        props = schemas[schema].get("properties", {})
        marked = {k for k, v in props.items() if isinstance(v, dict) and v.get("x-tacod-extension")}
        allowed = EXTENSIONS.get(model, set())
        check(marked == allowed, f"{schema}: the spec marks {sorted(marked)}, the test allows {sorted(allowed)}")
    return "strict validation: the extension fields allowed are the spec's"


def wait_status(client, job_id, status):
    """Polls a job until it has status; the job."""
    t0 = time.monotonic()
    while True:
        job = client.fine_tuning.jobs.retrieve(job_id)
        if job.status == status:
            return job
        check(
            job.status not in ("failed", "cancelled", "succeeded"),
            f"{job_id} ended {job.status} waiting for {status}: {job.error}",
        )
        check(time.monotonic() - t0 < DEADLINE_S, f"{job_id} never reached {status} (is {job.status})")
        time.sleep(0.1)


RESULTS_HEADER = [
    "step",
    "train_loss",
    "train_accuracy",
    "valid_loss",
    "valid_mean_token_accuracy",
    "full_valid_loss",
    "full_valid_mean_token_accuracy",
    "learning_rate",
    "tokens_per_s",
    "tokens",
    "mem_peak_bytes",
    "valid_exact_match",
]


def results_and_metrics(client, train_id):
    """Checkpoint metrics under OpenAI's names and the result file, through the SDK."""
    val = client.files.create(file=("count_val.jsonl", (FIXTURES / "data" / "count_val.jsonl").read_bytes()), purpose="fine-tune")
    # evaluations at 2, 4 and 6 (the last step), checkpoints at 3 and 6
    taco = {"steps": 6, "seq_len": 24, "eval_every": 2, "checkpoint_every": 3, "keep_checkpoints": 4, "log_every": 1}
    job = client.fine_tuning.jobs.create(
        model="llama_gqa", training_file=train_id, validation_file=val.id, suffix="res", extra_body={"taco": taco}
    )
    done = wait_status(client, job.id, "succeeded")
    events = list(client.fine_tuning.jobs.list_events(job.id, limit=100))
    steps = {e.data["step"]: e.data for e in events if e.type == "metrics" and "train_loss" in (e.data or {})}
    evals = {e.data["step"]: e.data for e in events if e.type == "metrics" and "val_loss" in (e.data or {})}
    check(sorted(steps) == [1, 2, 3, 4, 5, 6] and sorted(evals) == [2, 4, 6], f"metrics events: {sorted(steps)} {sorted(evals)}")

    ckpts = client.fine_tuning.jobs.checkpoints.list(job.id).data
    check(sorted(c.step_number for c in ckpts) == [3, 6], f"checkpoints: {[c.step_number for c in ckpts]}")
    for c in ckpts:
        m, n = c.metrics, c.step_number
        ev = evals[2 if n == 3 else 6]  # the last evaluation at or before the step
        check(m.step == n, f"checkpoint {n}: metrics.step {m.step}")
        check(m.train_loss == steps[n]["train_loss"], f"checkpoint {n}: train_loss {m.train_loss}")
        check(
            m.train_mean_token_accuracy == steps[n]["train_mean_token_accuracy"],
            f"checkpoint {n}: train_mean_token_accuracy {m.train_mean_token_accuracy}",
        )
        check(m.valid_loss == ev["val_loss"] and m.full_valid_loss == ev["val_loss"], f"checkpoint {n}: {m}")
        check(
            m.valid_mean_token_accuracy == ev["val_token_accuracy"]
            and m.full_valid_mean_token_accuracy == ev["val_token_accuracy"],
            f"checkpoint {n}: {m}",
        )

    check(len(done.result_files) == 1, f"result_files: {done.result_files}")
    rid = done.result_files[0]
    rf = client.files.retrieve(rid)
    check(rf.purpose == "fine-tune-results" and rf.filename == "step_metrics.csv", f"result file: {rf}")
    listed = [x for x in client.files.list() if x.id == rid]
    check(len(listed) == 1 and listed[0].purpose == "fine-tune-results", f"files.list: {listed}")
    text = client.files.content(rid).read().decode()
    check(len(text.encode()) == rf.bytes, "result file: bytes")
    rows = list(csv.reader(io.StringIO(text)))
    check(rows[0] == RESULTS_HEADER, f"result file header: {rows[0]}")
    by_step = {int(r[0]): r for r in rows[1:]}
    check(sorted(by_step) == [1, 2, 3, 4, 5, 6], f"result file steps: {sorted(by_step)}")
    for n, r in by_step.items():
        check(float(r[1]) == steps[n]["train_loss"], f"result file: step {n} train_loss {r[1]}")
        check(float(r[2]) == steps[n]["train_mean_token_accuracy"], f"result file: step {n} train_accuracy {r[2]}")
        if n in evals:
            check(float(r[3]) == evals[n]["val_loss"] == float(r[5]), f"result file: step {n} valid_loss {r[3]}")
        else:
            check(r[3] == r[4] == r[5] == r[6] == "", f"result file: step {n} has no evaluation: {r}")
    try:
        client.fine_tuning.jobs.create(model="llama_gqa", training_file=rid, extra_body={"taco": {"seq_len": 24}})
        check(False, "a result file was accepted as training data")
    except openai.BadRequestError as e:
        check(e.code == "invalid_file_purpose" and e.param == "training_file", f"result file as data: {e.code} {e.param}")
    return ["checkpoint metrics and the result file (fine-tune-results CSV)"]


def run(base_url):
    strict = openai.OpenAI(
        base_url=base_url,
        api_key=TOKEN,
        max_retries=0,
        timeout=30,
        _strict_response_validation=True,
        http_client=strict_http(),
    )
    # the SDK's FineTuningJob has no "paused": only for paused jobs
    lenient = openai.OpenAI(base_url=base_url, api_key=TOKEN, max_retries=0, timeout=30, http_client=strict_http())
    other = openai.OpenAI(
        base_url=base_url,
        api_key=OTHER_TOKEN,
        max_retries=0,
        timeout=30,
        _strict_response_validation=True,
        http_client=strict_http(),
    )
    client = strict
    steps = []

    # ---- models
    models = client.models.list()
    ids = [m.id for m in models]
    check("llama_gqa" in ids, f"models.list: {ids}")
    check(all(m.object == "model" and m.owned_by == "tacod" and m.created > 0 for m in models), "model fields")
    steps.append("models.list")

    # ---- files
    data = TRAIN.read_bytes()
    with open(TRAIN, "rb") as fh:
        f = client.files.create(file=fh, purpose="fine-tune")
    check(f.id.startswith("file-") and f.object == "file", f"files.create: {f}")
    check(f.bytes == len(data) and f.filename == TRAIN.name, f"files.create: {f.bytes} {f.filename}")
    check(f.purpose == "fine-tune" and f.status == "processed", f"files.create: {f.purpose} {f.status}")
    check(f.id in [x.id for x in client.files.list()], "files.list lacks the upload")
    check(client.files.retrieve(f.id) == f, "files.retrieve differs from files.create")
    check(client.files.content(f.id).read() == data, "files.content is not the uploaded bytes")
    try:
        with open(TRAIN, "rb") as fh:
            client.files.create(file=fh, purpose="batch")
        check(False, "purpose=batch was accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.code == "invalid_purpose", f"purpose=batch: {e.code}")
    steps.append("files.create/list/retrieve/content")

    # ---- a job to the end
    job = client.fine_tuning.jobs.create(
        model="llama_gqa",
        training_file=f.id,
        hyperparameters={"n_epochs": 1, "batch_size": 4},
        suffix="sdk",
        seed=1,
        metadata={"run": "sdk"},
        extra_body={"taco": {"steps": 4, "seq_len": 24}},
    )
    check(job.id.startswith("ftjob-") and job.object == "fine_tuning.job", f"jobs.create: {job.id}")
    # answered at once: the data is validated in the background
    check(job.status == "validating_files" and job.model == "llama_gqa", f"jobs.create: {job.status} {job.model}")
    check(job.training_file == f.id and job.validation_file is None, "jobs.create: files")
    check(job.seed == 1 and job.metadata == {"run": "sdk"}, f"jobs.create: {job.seed} {job.metadata}")
    # the values the job runs with: taco.steps, not n_epochs, sets its length
    check(
        job.hyperparameters.n_epochs is None and job.hyperparameters.batch_size == 4,
        f"jobs.create: {job.hyperparameters}",
    )
    check(job.fine_tuned_model is None and job.finished_at is None and job.error is None, "jobs.create: not done")
    check(job.method is not None and job.method.type == "supervised", f"jobs.create: {job.method}")
    extra = job.model_extra or {}
    check(extra.get("taco") == {"steps": 4, "seq_len": 24}, f"jobs.create: taco {extra.get('taco')}")
    check(extra.get("user_provided_suffix") == "sdk", "jobs.create: user_provided_suffix")
    done = wait_status(client, job.id, "succeeded")
    check(done.fine_tuned_model == f"ft:llama_gqa:sdk:{job.id[6:]}", f"fine_tuned_model: {done.fine_tuned_model}")
    check(done.trained_tokens is not None and done.trained_tokens > 0, f"trained_tokens: {done.trained_tokens}")
    check(done.finished_at is not None and done.finished_at >= done.created_at, "finished_at")
    check(done.error is None, f"error: {done.error}")
    steps.append("jobs.create/retrieve until succeeded")

    # ---- events
    page = client.fine_tuning.jobs.list_events(job.id, limit=100)
    events = page.data
    check(not page.has_more and len(events) >= 4, f"list_events: {len(events)} events, has_more {page.has_more}")
    check(all(e.object == "fine_tuning.job.event" for e in events), "event objects")
    check(events[-1].message == "Created fine-tuning job", f"oldest event: {events[-1].message}")
    check(events[-2].message == f"Validating training file: {f.id}", f"second event: {events[-2].message}")
    check(any(e.data == {"status": "queued", "validation": None} for e in events), "no validated event")
    check(events[0].created_at >= events[-1].created_at, "events are newest first")
    metrics = [e for e in events if e.type == "metrics" and e.data and "train_loss" in e.data]
    check(len(metrics) == 4, f"{len(metrics)} step metrics for 4 steps")
    check(metrics[0].data["step"] == 4 and metrics[0].data["total_steps"] == 4, f"last step: {metrics[0].data}")
    check(any(e.data == {"status": "succeeded"} for e in events), "no succeeded status event")
    two = client.fine_tuning.jobs.list_events(job.id, limit=2)
    check(len(two.data) == 2 and two.has_more, "list_events(limit=2)")
    check([e.id for e in two.data] == [e.id for e in events[:2]], "list_events(limit=2) is the newest two")
    steps.append("jobs.list_events")

    # no checkpoint_every and never stopped: no checkpoint
    check(client.fine_tuning.jobs.checkpoints.list(job.id).data == [], "checkpoints of job 1")

    # ---- a long job: pause, resume, cancel
    long_job = client.fine_tuning.jobs.create(
        model="llama_gqa",
        training_file=f.id,
        suffix="long",
        extra_body={"taco": {"steps": 100000, "seq_len": 24}},
    )
    check(long_job.seed == 0 and long_job.hyperparameters.n_epochs is None, "defaults of job 2")
    wait_status(client, long_job.id, "running")

    # ---- list pagination: newest first, limit and after
    first = client.fine_tuning.jobs.list(limit=1)
    check([j.id for j in first.data] == [long_job.id] and first.has_more, "jobs.list(limit=1)")
    second = client.fine_tuning.jobs.list(limit=1, after=first.data[0].id)
    check([j.id for j in second.data] == [job.id] and not second.has_more, "jobs.list(limit=1, after)")
    check(second.data[0].status == "succeeded", "jobs.list: job 1's status")
    every = [j.id for j in client.fine_tuning.jobs.list(limit=1)]  # the SDK pages with after
    check(every == [long_job.id, job.id], f"jobs.list auto-paging: {every}")
    steps.append("jobs.list (limit, after, auto-paging)")

    t0 = time.monotonic()  # a step done: the pause has something to checkpoint
    while not client.fine_tuning.jobs.retrieve(long_job.id).trained_tokens:
        check(time.monotonic() - t0 < DEADLINE_S, "job 2 makes no progress")
        time.sleep(0.1)
    p = client.fine_tuning.jobs.pause(long_job.id)  # asked to stop: still running
    check(p.id == long_job.id and p.status in ("running", "paused"), f"pause: {p.status}")
    paused = wait_status(lenient, long_job.id, "paused")
    check(paused.finished_at is None and paused.trained_tokens > 0, "paused job")
    ckpts = client.fine_tuning.jobs.checkpoints.list(long_job.id)
    check(len(ckpts.data) >= 1 and not ckpts.has_more, f"checkpoints after pause: {ckpts.data}")
    c = ckpts.data[0]
    check(c.object == "fine_tuning.job.checkpoint" and c.fine_tuning_job_id == long_job.id, f"checkpoint: {c}")
    check(c.id == f"ftckpt-{long_job.id[6:]}-{c.step_number}" and c.step_number > 0, f"checkpoint id: {c.id}")
    check(c.fine_tuned_model_checkpoint.endswith(f":ckpt-step-{c.step_number}"), "checkpoint model name")
    check(c.metrics.step == c.step_number, f"checkpoint metrics: {c.metrics}")
    steps.append("jobs.pause, jobs.checkpoints.list")
    r = client.fine_tuning.jobs.resume(long_job.id)
    check(r.status == "queued", f"resume: {r.status}")
    try:
        client.fine_tuning.jobs.resume(long_job.id)
        check(False, "resume of a job that is not paused was accepted")
    except openai.ConflictError as e:
        check(e.status_code == 409 and e.code == "invalid_state", f"resume twice: {e.code}")
    wait_status(client, long_job.id, "running")
    steps.append("jobs.resume")
    cancel = client.fine_tuning.jobs.cancel(long_job.id)
    check(cancel.status in ("running", "cancelled"), f"cancel: {cancel.status}")
    gone = wait_status(client, long_job.id, "cancelled")
    check(gone.finished_at is not None and gone.fine_tuned_model is None, "cancelled job")
    steps.append("jobs.cancel")
    steps += fine_tuned_models(client, other, f, done, c)

    # ---- errors
    try:
        client.fine_tuning.jobs.retrieve("ftjob-doesnotexist")
        check(False, "an unknown job was found")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and e.code == "not_found", f"unknown job: {e.code}")
    try:
        client.fine_tuning.jobs.cancel(job.id)
        check(False, "a finished job was cancelled")
    except openai.BadRequestError as e:
        check(e.code == "job_finished", f"cancel of a finished job: {e.code}")
    try:
        client.fine_tuning.jobs.create(
            model="llama_gqa", training_file=f.id, extra_body={"taco": {"steps": 4, "bogus": 1}}
        )
        check(False, "an unknown taco option was accepted")
    except openai.BadRequestError as e:
        check(e.code == "unknown_parameter" and e.param == "taco.bogus", f"taco.bogus: {e.code} {e.param}")
    steps.append("errors (404, 400)")

    # ---- data that is not valid: accepted, then failed with the reason
    bad = client.files.create(file=("bad.jsonl", b"not json\n"), purpose="fine-tune")
    job = client.fine_tuning.jobs.create(model="llama_gqa", training_file=bad.id, extra_body={"taco": {"seq_len": 24}})
    check(job.status == "validating_files", f"jobs.create of bad data: {job.status}")
    t0 = time.monotonic()
    while job.status == "validating_files":
        check(time.monotonic() - t0 < DEADLINE_S, "bad data: still validating")
        time.sleep(0.1)
        job = client.fine_tuning.jobs.retrieve(job.id)
    check(job.status == "failed" and job.error is not None, f"bad data: {job.status}")
    check(job.error.code == "invalid_training_file" and job.error.param == "training_file", f"bad data: {job.error}")
    check(bad.id in job.error.message, f"bad data: the error names {job.error.message}")
    check(job.finished_at is not None, "bad data: finished_at")
    steps.append("jobs.create of invalid data: validating_files, then failed")
    steps += results_and_metrics(client, f.id)
    steps += part4_checkpoint_paging(client, f.id)
    steps += part4_files_paging(client)
    steps += part5_hyperparameters(client, f.id)
    steps += part6_dpo(client, f.id)
    steps += part5_not_supported(client)
    steps.append(check_extensions_match_spec())
    seen = ", ".join(f"{k} {v}" for k, v in sorted(SEEN.items()))
    for kind in ("FileObject", "FineTuningJob", "FineTuningJobEvent", "FineTuningJobCheckpoint", "Model", "error"):
        check(SEEN[kind] > 0, f"strict validation saw no {kind}: {seen}")
    steps.append(f"strict validation of every reply ({seen})")
    return steps


def fine_tuned_models(client, other, f, done, ckpt):
    """Issue 31, part 1: SFT, then a job from the first's fine_tuned_model,
    then one from a checkpoint; the models list, retrieve and delete; and a
    second user's 404s. done: a succeeded job, ckpt: a checkpoint object."""
    steps = []
    ft = done.fine_tuned_model
    mine = {m.id: m for m in client.models.list()}
    check(ft in mine and mine[ft].owned_by == "alice", f"models.list lacks {ft}: {list(mine)}")
    extra = mine[ft].model_extra or {}
    check(extra.get("root") == "llama_gqa" and extra.get("parent") == "llama_gqa", f"{ft}: {extra}")
    check(mine["llama_gqa"].owned_by == "tacod", "a base model's owner")
    m = client.models.retrieve(ft)
    check(m.id == ft and m.owned_by == "alice" and m.created >= done.created_at, f"models.retrieve: {m}")
    m = client.models.retrieve(ckpt.fine_tuned_model_checkpoint)
    check(m.id == ckpt.fine_tuned_model_checkpoint, f"models.retrieve of a checkpoint: {m}")
    steps.append("models.list/retrieve: a fine-tuned model and a checkpoint")

    # the second user: every one of them is a 404, as a model that does not exist
    check(ft not in [x.id for x in other.models.list()], "another user lists the model")
    for call in (
        lambda: other.models.retrieve(ft),
        lambda: other.models.retrieve("ft:llama_gqa:sdk:000000000000000000000000"),
        lambda: other.models.delete(ft),
        lambda: other.fine_tuning.jobs.create(model=ft, training_file=f.id),
        lambda: other.fine_tuning.jobs.retrieve(done.id),
    ):
        try:
            call()
            check(False, "another user reached alice's model or job")
        except openai.NotFoundError as e:
            check(e.status_code == 404, f"another user: {e.status_code}")
    steps.append("a second user's 404s")

    # a job from the fine-tuned model, then one from a checkpoint
    for start, suffix in ((ft, "again"), (ckpt.fine_tuned_model_checkpoint, "ckpt")):
        job = client.fine_tuning.jobs.create(
            model=start, training_file=f.id, suffix=suffix, extra_body={"taco": {"steps": 2, "seq_len": 24}}
        )
        check(job.model == start, f"jobs.create from {start}: model {job.model}")
        job = wait_status(client, job.id, "succeeded")
        name = f"ft:llama_gqa:{suffix}:{job.id[6:]}"
        check(job.fine_tuned_model == name, f"the chain's name: {job.fine_tuned_model}")
        m = client.models.retrieve(name)
        check((m.model_extra or {}).get("parent") == start, f"{name}'s parent: {m.model_extra}")
    steps.append("jobs.create from a fine-tuned model and from a checkpoint")

    gone = client.models.delete(ft)
    check(gone.id == ft and gone.deleted and gone.object == "model", f"models.delete: {gone}")
    for call in (lambda: client.models.retrieve(ft), lambda: client.fine_tuning.jobs.create(model=ft, training_file=f.id)):
        try:
            call()
            check(False, "a deleted model is still there")
        except openai.NotFoundError as e:
            check(e.code == "model_not_found", f"a deleted model: {e.code}")
    check(ft not in [x.id for x in client.models.list()], "models.list still has the deleted model")
    check(client.fine_tuning.jobs.retrieve(done.id).fine_tuned_model == ft, "the job forgot its model")
    steps.append("models.delete")
    return steps


def expect_error(cls, code, param, call):
    """call() raises the SDK's error class cls with OpenAI's code and param."""
    try:
        call()
    except cls as e:
        check(e.code == code and e.param == param, f"{cls.__name__}: code {e.code} param {e.param}: {e.message}")
        return e
    raise AssertionError(f"no {cls.__name__} ({code})")


def part4_checkpoint_paging(client, training_file):
    """Checkpoints paged as OpenAI's: newest step first, limit, after,
    has_more only when a next page has a checkpoint that can be
    downloaded (keep_checkpoints removed the older ones' weights)."""
    job = client.fine_tuning.jobs.create(
        model="llama_gqa",
        training_file=training_file,
        suffix="ckpt",
        extra_body={"taco": {"steps": 6, "seq_len": 24, "checkpoint_every": 1, "keep_checkpoints": 4}},
    )
    wait_status(client, job.id, "succeeded")
    ckpts = client.fine_tuning.jobs.checkpoints
    whole = ckpts.list(job.id)  # OpenAI's default limit, 10: all of them
    steps = [c.step_number for c in whole.data]
    check(steps == [6, 5, 4, 3] and not whole.has_more, f"checkpoints.list: steps {steps}, has_more {whole.has_more}")
    check(whole.first_id == whole.data[0].id and whole.last_id == whole.data[-1].id, "checkpoints first_id/last_id")
    check(all(c.id == f"ftckpt-{job.id[6:]}-{c.step_number}" for c in whole.data), "checkpoint ids")
    one = ckpts.list(job.id, limit=1)
    check([c.step_number for c in one.data] == [6] and one.has_more, f"limit=1: {one.data} {one.has_more}")
    check(one.first_id == one.last_id == one.data[0].id, "limit=1: first_id and last_id")
    # the SDK's auto-paging visits each once, newest first
    walked = [c.id for c in ckpts.list(job.id, limit=1)]
    check(walked == [c.id for c in whole.data], f"auto-paging with limit=1: {walked}")
    check([c.id for c in ckpts.list(job.id, limit=3)] == walked, "auto-paging with limit=3")
    page = ckpts.list(job.id, limit=3, after=one.data[0].id)
    check([c.step_number for c in page.data] == [5, 4, 3], f"after step 6: {[c.step_number for c in page.data]}")
    # steps 1 and 2 are rows whose weights are gone: no page for them
    check(not page.has_more, "has_more with only removed checkpoints older")
    last = ckpts.list(job.id, after=whole.data[-1].id)
    check(last.data == [] and not last.has_more and last.first_id is None, "after the oldest: an empty page")
    # a removed checkpoint's id still pages on below it
    below = ckpts.list(job.id, after=f"ftckpt-{job.id[6:]}-2")
    check(below.data == [] and not below.has_more, "after a removed checkpoint")
    expect_error(openai.NotFoundError, "not_found", "after", lambda: ckpts.list(job.id, after="ftckpt-other-3"))
    expect_error(openai.BadRequestError, "invalid_value", "limit", lambda: ckpts.list(job.id, limit=0))
    expect_error(openai.BadRequestError, "invalid_value", "limit", lambda: ckpts.list(job.id, limit=101))
    return ["checkpoints paging (limit, after, has_more, auto-paging)", part4_events_paging(client, job.id)]


def part4_events_paging(client, job_id):
    """Events newest first: auto-paging visits each once, and has_more is
    false on the last page, also after an id past the newest."""
    events = client.fine_tuning.jobs.list_events
    every = events(job_id, limit=100)
    ids = [e.id for e in every.data]
    check(len(ids) > 6 and not every.has_more, f"list_events: {len(ids)} events")
    check([e.id for e in events(job_id, limit=3)] == ids, "list_events auto-paging with limit=3")
    check(len(events(job_id).data) == min(20, len(ids)), "list_events: OpenAI's default limit, 20")
    tail = events(job_id, limit=len(ids), after=ids[0])
    check([e.id for e in tail.data] == ids[1:] and not tail.has_more, "list_events after the newest")
    past = events(job_id, limit=2, after=f"ftevent-{job_id[6:]}-999999")
    check([e.id for e in past.data] == ids[:2] and past.has_more, "list_events after an id past the newest")
    end = events(job_id, after=ids[-1])
    check(end.data == [] and not end.has_more and end.first_id is None, "list_events after the oldest")
    return "events paging (limit, after, has_more, auto-paging)"


def part4_files_paging(client):
    """Files paged as OpenAI's: order desc (default) or asc, after, limit
    (OpenAI's range), purpose."""
    for i in range(3):
        client.files.create(file=(f"page-{i}.jsonl", f'{{"text": "page {i}"}}\n'.encode()), purpose="fine-tune")
    first = client.files.list()  # OpenAI's default limit, 10000: all, 100 a page
    desc = [x.id for x in first.data]
    check(len(desc) >= 5 and not first.has_more, f"files.list: {len(desc)} files, has_more {first.has_more}")
    times = [x.created_at for x in first.data]
    check(times == sorted(times, reverse=True), "files.list is not newest first")
    asc = client.files.list(order="asc")
    check([x.id for x in asc.data] == desc[::-1], "files.list(order=asc) is not the reverse")
    check([x.id for x in client.files.list(limit=1)] == desc, "files auto-paging with limit=1")
    check([x.id for x in client.files.list(limit=2, order="asc")] == desc[::-1], "asc auto-paging with limit=2")
    page = client.files.list(limit=2, after=desc[1])
    check([x.id for x in page.data] == desc[2:4] and page.has_more == (len(desc) > 4), "files.list(after, limit)")
    page = client.files.list(limit=2, after=desc[-3], order="asc")
    check([x.id for x in page.data] == desc[-4:-6:-1], "files.list(after, limit, order=asc)")
    tuned = [x.id for x in client.files.list(purpose="fine-tune")]
    results = client.files.list(purpose="fine-tune-results").data
    check(all(x.purpose == "fine-tune-results" for x in results), "purpose=fine-tune-results")
    check(sorted(tuned + [x.id for x in results]) == sorted(desc), "the purposes do not add up to every file")
    none = client.files.list(purpose="batch")
    check(none.data == [] and not none.has_more and none.last_id is None, "purpose=batch")
    check(len(client.files.list(limit=10000).data) == len(desc), "limit=10000")
    expect_error(openai.BadRequestError, "invalid_value", "order", lambda: client.files.list(order="sideways"))
    expect_error(openai.BadRequestError, "invalid_value", "limit", lambda: client.files.list(limit=10001))
    expect_error(openai.BadRequestError, "invalid_value", "purpose", lambda: client.files.list(purpose="fine_tune"))
    expect_error(openai.NotFoundError, "not_found", "id", lambda: client.files.list(after="file-doesnotexist"))
    return ["files paging (order, after, limit, purpose)"]


def part5_hyperparameters(client, training_file):
    """method.supervised.hyperparameters, the deprecated top-level ones, and
    the job object's effective values in both places."""
    jobs = client.fine_tuning.jobs

    def create(**kw):
        job = jobs.create(model="llama_gqa", training_file=training_file, extra_body={"taco": {"seq_len": 24}}, **kw)
        jobs.cancel(job.id)  # validating: cancelled at once, nothing trains
        return job

    def hp(job):
        got = job.hyperparameters.to_dict()
        check(
            job.method.type == "supervised" and job.method.supervised.hyperparameters.to_dict() == got,
            f"{job.id}: method's hyperparameters {job.method} differ from {got}",
        )
        return got

    def method(**h):
        return {"type": "supervised", "supervised": {"hyperparameters": h}}

    job = create(method=method(n_epochs=2, batch_size=2, learning_rate_multiplier=0.5))
    got = hp(job)
    check(got == {"n_epochs": 2, "batch_size": 2, "learning_rate_multiplier": 0.5}, f"method's: {got}")
    check(hp(jobs.retrieve(job.id)) == got, "retrieve: another hyperparameters")
    # the deprecated place, and "auto": tacod's defaults
    got = hp(create(hyperparameters={"n_epochs": "auto", "learning_rate_multiplier": 2}))
    check(got == {"n_epochs": 3, "batch_size": 4, "learning_rate_multiplier": 2.0}, f"top level's: {got}")
    # both places, the same value or different fields: accepted
    got = hp(create(hyperparameters={"batch_size": 8, "n_epochs": 1}, method=method(batch_size=8)))
    check(got == {"n_epochs": 1, "batch_size": 8, "learning_rate_multiplier": 1.0}, f"both: {got}")
    # both places, different values: refused, naming method's field
    for top, sup, name in (({"batch_size": 8}, {"batch_size": 16}, "batch_size"),
                           ({"n_epochs": "auto"}, {"n_epochs": 2}, "n_epochs")):
        e = expect_error(
            openai.BadRequestError,
            "conflicting_hyperparameters",
            f"method.supervised.hyperparameters.{name}",
            lambda: jobs.create(
                model="llama_gqa", training_file=training_file, hyperparameters=top, method=method(**sup)
            ),
        )
        check(e.status_code == 400 and f"hyperparameters.{name}" in e.message, e.message)
    e = expect_error(
        openai.BadRequestError,
        "unsupported_method",
        "method.type",
        lambda: jobs.create(
            model="llama_gqa", training_file=training_file, method={"type": "reinforcement", "reinforcement": {}}
        ),
    )
    check("supervised" in e.message and "dpo" in e.message, e.message)
    return ["method.supervised.hyperparameters, the top level's, and a conflict (400)"]


PAIRS = b"".join(
    json.dumps(
        {
            "input": {"messages": [{"role": "user", "content": q}]},
            "preferred_output": [{"role": "assistant", "content": good}],
            "non_preferred_output": [{"role": "assistant", "content": bad}],
        }
    ).encode()
    + b"\n"
    for q, good, bad in (("2+2?", "4", "5"), ("Hi", "Hello!", "Go away."))
)


def part6_dpo(client, training_file):
    """method dpo as the SDK sends it: a job on preference pairs runs to the
    end (the reference pass, the pairs' metrics), its method echoed in the
    SDK's types, and its model downloads; each method refuses the other's
    data at once, naming the file; beta out of range names itself."""
    jobs = client.fine_tuning.jobs
    pairs = client.files.create(file=("pairs.jsonl", PAIRS), purpose="fine-tune")
    dpo = {"type": "dpo", "dpo": {"hyperparameters": {"beta": 0.25, "batch_size": 2, "n_epochs": "auto"}}}
    # chat_llama: a tokenizer and a chat template render the pairs
    job = jobs.create(model="chat_llama", training_file=pairs.id, method=dpo, extra_body={"taco": {"seq_len": 24}})
    done = wait_status(client, job.id, "succeeded")
    check(done.fine_tuned_model and done.fine_tuned_model.startswith("ft:chat_llama:"), f"model {done.fine_tuned_model}")
    for j in (job, done):
        check(j.method.type == "dpo" and j.method.supervised is None, f"{j.id}: method {j.method}")
        h = j.method.dpo.hyperparameters
        check(
            (h.beta, h.batch_size, h.n_epochs, h.learning_rate_multiplier) == (0.25, 2, 3, 1.0),
            f"{j.id}: method.dpo.hyperparameters {h}",
        )
        got = j.hyperparameters.to_dict()
        check(got == {"n_epochs": 3, "batch_size": 2, "learning_rate_multiplier": 1.0}, f"{j.id}: hyperparameters {got}")
    events = list(jobs.list_events(job.id, limit=100))
    metrics = [e.data for e in events if e.type == "metrics" and e.data and "train_loss" in e.data]
    check(len(metrics) == 3, f"{len(metrics)} step metrics (3 epochs of one batch)")
    first = min(metrics, key=lambda d: d["step"])
    # the first step scores with the starting weights: its loss is log 2
    check(abs(first["train_loss"] - math.log(2)) < 1e-12, f"first DPO loss {first['train_loss']}")
    for k in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"):
        check(all(k in d for d in metrics), f"metrics without {k}")
    check(any(e.message.startswith("Reference log-probs") for e in events), "no reference pass in the events")
    tar = client.get(f"/fine_tuning/jobs/{job.id}/model/content", cast_to=httpx.Response)
    check(tar.status_code == 200 and len(tar.content) > 1000, f"model download: {tar.status_code}")
    e = expect_error(
        openai.BadRequestError,
        "invalid_training_file",
        "training_file",
        lambda: jobs.create(model="llama_gqa", training_file=training_file, method={"type": "dpo"}),
    )
    check(training_file in e.message and "preference pairs" in e.message, e.message)
    e = expect_error(
        openai.BadRequestError,
        "invalid_training_file",
        "training_file",
        lambda: jobs.create(model="llama_gqa", training_file=pairs.id),
    )
    check(pairs.id in e.message and "dpo" in e.message, e.message)
    e = expect_error(
        openai.BadRequestError,
        "invalid_validation_file",
        "validation_file",
        lambda: jobs.create(model="llama_gqa", training_file=training_file, validation_file=pairs.id),
    )
    expect_error(
        openai.BadRequestError,
        "invalid_hyperparameter",
        "method.dpo.hyperparameters.beta",
        lambda: jobs.create(
            model="llama_gqa", training_file=pairs.id, method={"type": "dpo", "dpo": {"hyperparameters": {"beta": 0}}}
        ),
    )
    expect_error(
        openai.BadRequestError,
        "invalid_method",
        "method.supervised",
        lambda: jobs.create(model="llama_gqa", training_file=pairs.id, method={"type": "dpo", "supervised": {}}),
    )
    return ["method dpo: a job on pairs to the end (log 2 first, TRL's metrics, the download), echoed; the wrong data kind, beta and a mismatched method refused (400)"]


def part5_not_supported(client):
    """OpenAI's checkpoint permissions and graders: a documented 404 in the
    error envelope, the SDK's NotFoundError."""
    perms = client.fine_tuning.checkpoints.permissions
    name = "ft:llama_gqa:ckpt:0123abcd:ckpt-step-6"
    grader = {"type": "string_check", "name": "g", "input": "a", "reference": "a", "operation": "eq"}
    calls = [
        lambda: perms.create(name, project_ids=["proj_abc"]),
        lambda: perms.retrieve(name),
        lambda: perms.delete("cp_abc", fine_tuned_model_checkpoint=name),
        lambda: client.fine_tuning.alpha.graders.run(grader=grader, model_sample="a"),
        lambda: client.fine_tuning.alpha.graders.validate(grader=grader),
    ]
    for call in calls:
        e = expect_error(openai.NotFoundError, "not_supported", None, call)
        check(e.status_code == 404 and "not supported" in e.message, e.message)
    return ["checkpoint permissions and graders: 404 not_supported"]


def main():
    bin_dir = os.environ.get("TACO_BIN_DIR")
    if not bin_dir:
        print("test_sdk.py: TACO_BIN_DIR (the build directory) is not set", file=sys.stderr)
        return 2
    print(f"openai {openai.__version__}")
    t0 = time.monotonic()
    daemon = Tacod(bin_dir)
    try:
        steps = run(f"http://127.0.0.1:{daemon.port}/v1")
    except Exception:
        print("---- tacod's log\n" + daemon.log_tail(), file=sys.stderr)
        raise
    finally:
        daemon.stop()
    for s in steps:
        print(f"ok  {s}")
    print(f"openai_sdk: {len(steps)} passed, 0 failed ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
