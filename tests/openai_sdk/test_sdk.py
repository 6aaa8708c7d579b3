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

Retries are off (max_retries=0): the SDK retries 409 and 5xx by default,
which would hide an error behind a delay. Run by CTest as `openai_sdk`.
"""

import csv
import hashlib
import io
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

import openai

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

    def __init__(self, bin_dir):
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
        base_url=base_url, api_key=TOKEN, max_retries=0, timeout=30, _strict_response_validation=True
    )
    # the SDK's FineTuningJob has no "paused": only for paused jobs
    lenient = openai.OpenAI(base_url=base_url, api_key=TOKEN, max_retries=0, timeout=30)
    other = openai.OpenAI(
        base_url=base_url, api_key=OTHER_TOKEN, max_retries=0, timeout=30, _strict_response_validation=True
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
    check(
        job.hyperparameters.n_epochs == 1 and job.hyperparameters.batch_size == 4,
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
