#!/usr/bin/env python3
"""TACO against AdamW where fine-tuning happens: the quality benchmark.

  python3 bench/quality/quality.py                      (about 15 minutes)

1. A base model is pre-trained with AdamW on the demo's counting
   (examples/demo/: the random model and train.jsonl), once: it is cached
   in OUT/base/ and reused while its recipe and inputs are unchanged.
2. It is fine-tuned to each task of tasks.py (other strides, reversed
   answers, another format, a one-word label task, a multiple-choice
   task), with TACO (k 16, beta 0.9: the preprint's and tacod's defaults)
   and with AdamW, each over a learning-rate sweep plus its `auto` rate
   (the job leaves `lr` out: taco-train's default for the optimizer), at
   equal steps and equal tokens, for every seed.
3. It prints, per task, optimizer and rate: the best validation loss and
   score (validation token accuracy, or multiple-choice accuracy for the
   label and choice tasks) as the mean and the range over the seeds, the
   steps to the target score, and the optimizer's state; then each
   optimizer's best point and `auto` side by side, with the ratios.

With --model, --train and --validation (and --mc) it fine-tunes a model
you supply instead, on your task, with the same sweep and table: see
docs/quality.md. Every run is a taco-train job (docs/job.md); its events
(docs/events.md) are the measurements.
"""
import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import init_model  # noqa: E402
import tasks  # noqa: E402

DEMO = os.path.join(ROOT, "examples", "demo")
# The base's recipe: the demo's best from-scratch AdamW run (issue 33's
# sweep: lr 3e-3). Part of the cache key.
BASE_JOB = {"steps": 600, "batch_size": 16, "seq_len": 32, "lr": 3e-3,
            "schedule": "linear", "optimizer": "adamw", "seed": 0,
            "eval_every": 0}
SWEEP = {"taco": [1e-3, 3e-3, 1e-2, 3e-2], "adamw": [3e-4, 1e-3, 3e-3, 1e-2]}
NAMES = {"taco": "TACO", "adamw": "AdamW"}


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="TACO against AdamW on fine-tuning tasks: a "
        "learning-rate sweep per optimizer, several seeds, one table.")
    p.add_argument("--taco-train", default=os.path.join(ROOT, "build",
                                                         "taco-train"),
                   help="the taco-train binary (default: build/taco-train)")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "quality"),
                   help="work directory: the cached base, each run's job "
                   "and events, results.json (default: build/quality)")
    p.add_argument("--tasks", default=",".join(tasks.TASKS),
                   help="comma-separated built-in tasks (default: all: "
                   + ",".join(tasks.TASKS) + ")")
    p.add_argument("--seeds", type=int, default=3,
                   help="seeds per point: data split and order, rounding "
                   "(default 3)")
    p.add_argument("--steps", type=int, default=300,
                   help="optimizer steps of each fine-tune (default 300)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--target", type=float, default=0.95,
                   help="score whose first evaluation counts as reached "
                   "(default 0.95)")
    p.add_argument("--taco-lrs", help="comma-separated TACO sweep "
                   "(default " + ",".join(map(str, SWEEP["taco"])) + ")")
    p.add_argument("--adamw-lrs", help="comma-separated AdamW sweep "
                   "(default " + ",".join(map(str, SWEEP["adamw"])) + ")")
    p.add_argument("--no-auto", action="store_true",
                   help="sweep only: no run at the optimizers' auto rate")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="runs at once, each on one CPU thread on the CPU "
                   "backend (default: the CPUs)")
    p.add_argument("--backend", default="cpu", choices=["cpu", "cuda"],
                   help="taco-train --backend; cuda runs one job at a time")
    p.add_argument("--width", type=int,
                   help="pre-train a random model of this hidden size "
                   "instead of the demo's 64 (a multiple of 32; the "
                   "demo's shape otherwise): the scale study of "
                   "docs/quality.md")
    p.add_argument("--layers", type=int, default=2,
                   help="with --width: decoder layers (default 2)")
    p.add_argument("--model", help="your model directory (docs/quality.md): "
                   "fine-tune it instead of the built-in base")
    p.add_argument("--train", help="with --model: training data in a "
                   "format of docs/datasets.md")
    p.add_argument("--validation", help="with --model: validation data")
    p.add_argument("--mc", help="with --model: an eval_multiple_choice file;"
                   " the score is then its accuracy")
    p.add_argument("--job", help="with --model: a JSON object of job "
                   "options every run gets (precision, packing, ...)")
    a = p.parse_args(argv)
    if a.model and not (a.train and a.validation):
        p.error("--model needs --train and --validation")
    if not a.model and (a.train or a.validation or a.mc or a.job):
        p.error("--train, --validation, --mc and --job go with --model")
    if a.model and a.width:
        p.error("--width builds a base of its own: not with --model")
    if a.layers < 1 or (a.width is not None and a.width < 32):
        p.error("--layers is at least 1, --width at least 32")
    if a.seeds < 1 or a.steps < 1 or a.jobs < 1:
        p.error("--seeds, --steps and --jobs are at least 1")
    a.sweep = {
        "taco": _lrs(p, a.taco_lrs, SWEEP["taco"]),
        "adamw": _lrs(p, a.adamw_lrs, SWEEP["adamw"]),
    }
    if a.backend == "cuda":
        a.jobs = 1
    for t in a.tasks.split(","):
        if not a.model and t not in tasks.TASKS:
            p.error(f"--tasks: no task {t!r} (there are "
                    + ", ".join(tasks.TASKS) + ")")
    return a


def _lrs(p, text, default):
    if not text:
        return list(default)
    try:
        v = [float(x) for x in text.split(",")]
    except ValueError:
        p.error(f"not a list of learning rates: {text!r}")
    if any(not 0 < x <= 10 for x in v):
        p.error(f"a learning rate outside (0, 10]: {text!r}")
    return v


def run_job(a, job, work):
    """Runs one taco-train job in WORK; returns its events. A failed run
    stops the benchmark with taco-train's own message."""
    os.makedirs(work, exist_ok=True)
    job = dict(job, output_dir=os.path.join(work, "out"), log_every=10)
    jpath = os.path.join(work, "job.json")
    with open(jpath, "w") as f:
        json.dump(job, f, indent=1)
    events = os.path.join(work, "events.jsonl")
    if os.path.exists(events):
        os.remove(events)
    env = dict(os.environ)
    if a.backend == "cpu" and a.jobs > 1:
        env["OMP_NUM_THREADS"] = "1"
    r = subprocess.run([a.taco_train, "--no-progress", "--backend",
                        a.backend, "--events-file", events, jpath],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"quality: {jpath}: taco-train exited with "
                         f"{r.returncode}:\n{r.stdout[-3000:]}")
    with open(events) as f:
        evs = [json.loads(line) for line in f if line.strip()]
    return evs


def base_model(a):
    """The demo's random model (or, with --width, one of that width)
    pre-trained with AdamW on the demo's counting, cached under OUT/base
    while the recipe and inputs are the same."""
    init = os.path.join(DEMO, "model")
    if a.width:
        init = os.path.join(a.out, "init")
        params = init_model.write(os.path.join(DEMO, "model"), init,
                                  a.width, a.layers)
        print(f"init: a random Llama of width {a.width}, {a.layers} "
              f"layers: {params} parameters ({init})")
    key = hashlib.sha256(json.dumps(BASE_JOB, sort_keys=True).encode())
    for name in (os.path.join(init, "model.safetensors"),
                 os.path.join(init, "config.json"),
                 os.path.join(init, "tokenizer.json"),
                 os.path.join(DEMO, "train.jsonl"),
                 os.path.join(DEMO, "val.jsonl")):
        with open(name, "rb") as f:
            key.update(f.read())
    key = key.hexdigest()[:16]
    base = os.path.join(a.out, "base")
    model = os.path.join(base, "out", "model")
    stamp = os.path.join(base, "recipe")
    try:
        with open(stamp) as f:
            if f.read().strip() == key and os.path.isfile(
                    os.path.join(model, "model.safetensors")):
                print(f"base: cached in {model} (recipe {key})")
                return model
    except FileNotFoundError:
        pass
    shutil.rmtree(base, ignore_errors=True)
    t = time.time()
    job = dict(BASE_JOB, model=init,
               train=os.path.join(DEMO, "train.jsonl"),
               validation=os.path.join(DEMO, "val.jsonl"))
    evs = run_job(argparse.Namespace(**dict(vars(a), jobs=1)), job, base)
    ev = [e for e in evs if e["event"] == "eval"][-1]
    with open(stamp, "w") as f:
        f.write(key + "\n")
    print(f"base: pre-trained with AdamW in {time.time() - t:.0f} s: "
          f"counting val loss {ev['val_loss']:.3f}, token accuracy "
          f"{ev['val_token_accuracy']:.3f} ({model})")
    return model


def task_files(a, name, seed):
    """Writes task NAME's files for SEED under OUT/tasks; returns the job
    options that name them."""
    d = os.path.join(a.out, "tasks", f"{name}-{seed}")
    os.makedirs(d, exist_ok=True)
    tasks.write(name, seed, d)
    opts = {"train": os.path.join(d, f"{name}_train.jsonl"),
            "validation": os.path.join(d, f"{name}_val.jsonl")}
    if tasks.SCORE[name] == "mc":
        opts["eval_multiple_choice"] = os.path.join(d, f"{name}_mc.jsonl")
    return opts


def measure(evs, score):
    """The measurements of one run from its events."""
    started = next(e for e in evs if e["event"] == "started")
    evals = [e for e in evs if e["event"] == "eval"]
    progress = [e for e in evs if e["event"] == "progress"]
    key = "mc_accuracy" if score == "mc" else "val_token_accuracy"
    return {
        "lr": started["lr"],  # the peak: the job's, or the auto one
        "state_bytes": started["optimizer_state_bytes"],
        "parameters": started["parameters"],
        "tokens": progress[-1]["tokens"],
        "curve": [(e["step"], e["val_loss"], e[key]) for e in evals],
    }


def summarize(runs, target):
    """Mean and range over the seeds of one point."""
    loss = [min(c[1] for c in r["curve"]) for r in runs]
    score = [max(c[2] for c in r["curve"]) for r in runs]
    reach = []
    for r in runs:
        hit = [c[0] for c in r["curve"] if c[2] >= target]
        reach.append(hit[0] if hit else None)
    hits = [x for x in reach if x is not None]
    return {
        "loss": stat(loss), "score": stat(score),
        "reach_mean": statistics.mean(hits) if hits else None,
        "reached": len(hits), "seeds": len(runs),
        "state_bytes": runs[0]["state_bytes"],
        "tokens": runs[0]["tokens"], "lr": runs[0]["lr"],
    }


def stat(v):
    return {"mean": statistics.mean(v), "min": min(v), "max": max(v),
            "values": v}


def fmt_stat(s, digits=3):
    return (f"{s['mean']:.{digits}f} [{s['min']:.{digits}f}, "
            f"{s['max']:.{digits}f}]")


def fmt_bytes(n):
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def fmt_reach(s, steps):
    if not s["reached"]:
        return f"not in {steps}"
    return f"{s['reach_mean']:.0f} ({s['reached']}/{s['seeds']})"


def table(rows, head):
    w = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w[i])
                                       for i, c in enumerate(r)) + " |"
    out = [line(head), "|" + "|".join("-" * (x + 2) for x in w) + "|"]
    return "\n".join(out + [line(r) for r in rows])


def auto_cell(points, best):
    """The auto point's loss and rate, and whether its mean lies within
    the seeds' range of the best sweep point (or below it)."""
    auto = [p for p in points if p["auto"]]
    if not auto:
        return "-"
    p = auto[0]
    ok = p["loss"]["mean"] <= best["loss"]["max"]
    return (f"{p['loss']['mean']:.3f} ({p['lr']:.0e}): "
            + ("within" if ok else "OUTSIDE") + " the best's range")


def best_point(points):
    """The sweep point with the lowest mean best-validation loss."""
    return min(points, key=lambda p: p["loss"]["mean"])


def main(argv):
    a = parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # progress, into a log too
    print("$ python3 bench/quality/quality.py " + " ".join(argv))
    a.taco_train = os.path.abspath(a.taco_train)
    if not os.access(a.taco_train, os.X_OK):
        raise SystemExit(f"quality: no taco-train at {a.taco_train} (build "
                         "with scripts/build.sh, or pass --taco-train)")
    if a.width:
        a.out = os.path.join(a.out, f"width{a.width}-layers{a.layers}")
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    if a.model:
        base = os.path.abspath(a.model)
        names = ["yours"]
        score = {"yours": "mc" if a.mc else "acc"}
        extra = json.loads(a.job) if a.job else {}
        if not isinstance(extra, dict):
            raise SystemExit("quality: --job is not a JSON object")
    else:
        base = base_model(a)
        names = a.tasks.split(",")
        score = tasks.SCORE
        extra = {}

    plan = []  # (task, optimizer, lr or None for auto, seed)
    for t in names:
        for opt in ("taco", "adamw"):
            lrs = list(a.sweep[opt]) + ([] if a.no_auto else [None])
            for lr in lrs:
                for s in range(a.seeds):
                    plan.append((t, opt, lr, s))

    def one(p):
        t, opt, lr, s = p
        if a.model:
            data = {"train": os.path.abspath(a.train),
                    "validation": os.path.abspath(a.validation)}
            if a.mc:
                data["eval_multiple_choice"] = os.path.abspath(a.mc)
        else:
            data = task_files(a, t, s)
        job = dict(extra, model=base, steps=a.steps,
                   batch_size=a.batch_size, seq_len=a.seq_len,
                   schedule="linear", optimizer=opt, seed=s,
                   eval_every=a.eval_every, **data)
        if lr is not None:
            job["lr"] = lr
        tag = f"{t}-{opt}-{'auto' if lr is None else f'{lr:g}'}-{s}"
        work = os.path.join(a.out, "runs", tag)
        m = measure(run_job(a, job, work), score[t])
        shutil.rmtree(os.path.join(work, "out"), ignore_errors=True)
        return p, m

    # The auto runs first: a sweep point at the rate auto chose is the
    # same job, so it takes their measurements instead of running again.
    results = {}
    done = [0]
    print(f"{len(plan)} points to measure, fine-tunes of {a.steps} steps x "
          f"{a.batch_size} sequences of {a.seq_len} tokens, {a.jobs} at a "
          "time")

    def run_all(points):
        with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
            for p, m in ex.map(one, points):
                results[p] = m
                done[0] += 1
                if done[0] % 10 == 0:
                    print(f"  {done[0]} runs, {time.time() - t0:.0f} s")

    run_all([p for p in plan if p[2] is None])
    rest = []
    for p in plan:
        t, opt, lr, s = p
        auto = results.get((t, opt, None, s))
        if lr is None:
            continue
        if auto and auto["lr"] == lr:
            results[p] = auto
        else:
            rest.append(p)
    run_all(rest)

    report = {"steps": a.steps, "batch_size": a.batch_size,
              "seq_len": a.seq_len, "seeds": a.seeds, "target": a.target,
              "tasks": {}}
    rows = []
    summary = []
    for t in names:
        points = {}
        for opt in ("taco", "adamw"):
            auto_lr = None if a.no_auto else results[(t, opt, None, 0)]["lr"]
            for lr in list(a.sweep[opt]) + ([] if a.no_auto else [None]):
                runs = [results[(t, opt, lr, s)] for s in range(a.seeds)]
                pt = summarize(runs, a.target)
                pt["optimizer"], pt["auto"] = opt, lr is None
                points.setdefault(opt, []).append(pt)
                if lr is None and auto_lr in a.sweep[opt]:
                    continue  # the sweep's row, marked
                rows.append([t, NAMES[opt],
                             f"{pt['lr']:.0e}" + (" (auto)" if pt["lr"] ==
                                                  auto_lr else ""),
                             fmt_stat(pt["loss"]), fmt_stat(pt["score"]),
                             fmt_reach(pt, a.steps),
                             fmt_bytes(pt["state_bytes"])])
        report["tasks"][t] = {"score": score[t], "points": points}
        best = {o: best_point([p for p in points[o] if not p["auto"]])
                for o in points}
        bt, ba = best["taco"], best["adamw"]
        report["tasks"][t]["best"] = {o: best[o]["lr"] for o in best}
        summary.append([
            t, f"{bt['loss']['mean']:.3f} ({bt['lr']:.0e})",
            f"{ba['loss']['mean']:.3f} ({ba['lr']:.0e})",
            f"{bt['loss']['mean'] / ba['loss']['mean']:.2f}",
            f"{bt['score']['mean']:.3f} / {ba['score']['mean']:.3f}"] +
            [auto_cell(points[o], best[o]) for o in ("taco", "adamw")] +
            [f"{ba['state_bytes'] / bt['state_bytes']:.0f}x"])

    score_name = {"acc": "token accuracy", "mc": "multiple-choice accuracy"}
    print()
    print(f"Fine-tunes of {a.steps} steps, {a.batch_size} x {a.seq_len} "
          f"tokens a step (equal for both), {a.seeds} "
          f"seed{'s' if a.seeds > 1 else ''}: the mean and "
          "[min, max] over the seeds of each run's best evaluation. Score: "
          + "; ".join(f"{t} {score_name[score[t]]}" for t in names) + ".")
    print()
    print(table(rows, ["task", "optimizer", "lr", "best val loss",
                       "best score", f"steps to {a.target:g}",
                       "optimizer state"]))
    print()
    print("Best sweep point of each optimizer (the lowest mean best "
          "validation loss, its rate), and each one's auto rate:")
    print()
    print(table(summary, ["task", "TACO best", "AdamW best",
                          "loss TACO/AdamW", "score TACO / AdamW",
                          "TACO auto", "AdamW auto", "state AdamW/TACO"]))
    path = os.path.join(a.out, "results.json")
    with open(path + ".tmp", "w") as f:
        json.dump(report, f, indent=1)
    os.replace(path + ".tmp", path)
    print(f"\n{done[0]} runs ({len(plan) - done[0]} sweep points were the "
          f"auto runs) in {time.time() - t0:.0f} s; every number in {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
