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
            cfg = {
                "listen": f"127.0.0.1:{self.port}",
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
        for _ in range(100):
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
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


def run(base_url):
    strict = openai.OpenAI(
        base_url=base_url, api_key="unused", max_retries=0, timeout=30, _strict_response_validation=True
    )
    # the SDK's FineTuningJob has no "paused": only for paused jobs
    lenient = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=30)
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
