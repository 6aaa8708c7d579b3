#!/usr/bin/env python3
"""The dashboard (GET /, daemon/dashboard/) in Debian's headless Chromium.

Starts two real tacod binaries (TACO_BIN_DIR) on free loopback ports with
fresh state and the demo model (examples/demo) as "tacod-demo": one without
a tokens file (every loopback client is the local admin), one with a tokens
file. Drives Chromium through Debian's chromedriver with selenium (the test
venv, tests/openai_sdk/requirements.txt) and checks what a user sees:

- the static files' headers (Content-Security-Policy, nosniff, ETag and
  304), and nosniff on the API's replies;
- the job list shows a job created through the API;
- that job's loss curve gains points while it trains (the Chart's point
  count read twice), and its metadata holding markup shows as text, with
  no element made of it;
- the device page lists it running;
- pause, resume and cancel on the job page do that;
- a job created through the new-job form (files uploaded through the file
  inputs, the model picked, options set, the plan's bar and data report
  shown) runs to success, with curves, and the browser saves its model;
- that job's final model converted to GGUF by its GGUF button, listed,
  and saved by the browser;
- a DPO job through the form, from that job's model, on the demo's
  preference pairs: its method shown, every series of its loss, reward
  accuracy and rewards charts equal to its events' values, its reference
  pass in the events; and another DPO job's reference pass shown in its
  Step while it runs (pairs written here: 8000 validation pairs, a
  reference pass of some seconds that the cancel comes well inside);
- against the tacod with a tokens file, the page asks for the token (401),
  works once it is given (a model downloads with it), and asks again for a
  wrong one.

Screenshots of every page go to build/dashboard/ (TACO_SCREENSHOT_DIR);
docs/dashboard-*.png are copies of two of them. Every wait is bounded
(TACO_BROWSER_TIME_SCALE scales them). About 20 s on 2 cores, 80 s under
the sanitizers.
Run by CTest as `browser_dashboard`.
"""

import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import tarfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo"
TOKEN = "tacod-browser-test-token"
XSS = '<img src=x onerror="window.__xss=1">'
BOLD = "<b>markup</b>"
# every wait is scaled by TACO_BROWSER_TIME_SCALE (CTest sets 3 under the
# sanitizers, where the demo trains 5 to 10 times slower)
SCALE = float(os.environ.get("TACO_BROWSER_TIME_SCALE", "1"))
WAIT_S = 30 * SCALE  # for any one thing to show


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(cond, what):
    if not cond:
        raise AssertionError(what)


class Tacod:
    """The real binary with its own state and the demo model."""

    def __init__(self, bin_dir, tokens=False):
        self.dir = Path(tempfile.mkdtemp(prefix="tacod-browser-"))
        shutil.copytree(DEMO / "model", self.dir / "models" / "tacod-demo")
        self.log = open(self.dir / "tacod.log", "w+b")
        self.proc = None
        self.token = TOKEN if tokens else None
        for _ in range(3):  # another process may take the port first
            self.port = free_port()
            cfg = {
                "listen": f"127.0.0.1:{self.port}",
                "state_dir": str(self.dir / "state"),
                "models_dir": str(self.dir / "models"),
                "taco_train": str(Path(bin_dir) / "taco-train"),
                "device_memory": "8GB",
                "cancel_timeout_s": 30,
            }
            if tokens:
                h = hashlib.sha256(TOKEN.encode()).hexdigest()
                (self.dir / "tokens").write_text(f"{h}  browser  user\n")
                cfg["tokens_file"] = str(self.dir / "tokens")
            (self.dir / "tacod.json").write_text(json.dumps(cfg))
            self.proc = subprocess.Popen(
                [str(Path(bin_dir) / "tacod"), "--config", str(self.dir / "tacod.json")],
                stdout=self.log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, OMP_WAIT_POLICY="passive"),
            )
            if self.wait_healthy():
                self.url = f"http://127.0.0.1:{self.port}"
                return
            self.proc.kill()
            self.proc.wait()
        raise RuntimeError("tacod did not answer /healthz:\n" + self.log_tail())

    def wait_healthy(self):
        for _ in range(100):
            if self.proc.poll() is not None:
                return False
            try:
                self.request("GET", "/healthz")
                return True
            except OSError:
                time.sleep(0.1)
        return False

    def request(self, method, path, body=None, headers=None):
        """(status, headers, bytes); raises only for no answer."""
        h = dict(headers or {})
        if self.token:
            h.setdefault("Authorization", "Bearer " + self.token)
        data = None
        if isinstance(body, dict):
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        elif body is not None:
            data, ctype = body
            h["Content-Type"] = ctype
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, method=method, headers=h
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def json(self, method, path, body=None):
        status, _, data = self.request(method, path, body)
        check(200 <= status < 300, f"{method} {path}: {status} {data[:500]!r}")
        return json.loads(data)

    def upload(self, path):
        b = uuid.uuid4().hex
        body = (
            f'--{b}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nfine-tune\r\n'
            f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
            "Content-Type: application/jsonl\r\n\r\n"
        ).encode() + path.read_bytes() + f"\r\n--{b}--\r\n".encode()
        return self.json("POST", "/v1/files", (body, f"multipart/form-data; boundary={b}"))["id"]

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


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("TACO_CHROMIUM", "/usr/bin/chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1000", "--hide-scrollbars", "--force-device-scale-factor=1",
              "--lang=en-US"):
        opts.add_argument(a)
    # Debian's chromedriver: selenium is not to fetch one (no network in CI)
    service = Service(executable_path=os.environ.get("TACO_CHROMEDRIVER", "/usr/bin/chromedriver"))
    d = webdriver.Chrome(options=opts, service=service)
    d.set_page_load_timeout(WAIT_S)
    d.set_script_timeout(WAIT_S)
    return d


def wait(d, what, f, timeout=WAIT_S):
    try:
        return WebDriverWait(d, timeout, poll_frequency=0.1).until(lambda _: f())
    except Exception as e:
        raise AssertionError(f"timed out ({timeout} s) waiting for {what}: {e!r}") from None


def points(d, canvas_id, dataset=0):
    return d.execute_script(
        "const c = Chart.getChart(document.getElementById(arguments[0]));"
        "return c ? c.data.datasets[arguments[1]].data.length : -1;",
        canvas_id,
        dataset,
    )


def attr(d, css, name):
    """An attribute of the first element css selects, read in one script
    (the pages redraw parts of themselves every 2 s: an element found in
    one call may be gone by the next)."""
    return d.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.getAttribute(arguments[1]) : null;", css, name
    )


def text(d, css):
    return d.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : null;", css)


def click(d, css):
    """A click in one script, for elements of a part redrawn every 2 s."""
    check(d.execute_script("const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e;", css),
          f"nothing to click at {css}")


def shown_status(d):
    return attr(d, "main .toolbar .badge", "data-status")


def saved_models(downloads):
    """How many complete model tars the browser saved (each named by the
    server's Content-Disposition)."""
    n = 0
    for p in downloads.iterdir():
        try:
            if p.suffix == ".tar" and any(n.endswith("/model.safetensors") for n in tarfile.open(p).getnames()):
                n += 1
        except (tarfile.TarError, OSError):
            pass  # still being written
    return n


def write_pairs(path, n, seed):
    """n preference pairs of the demo task (OpenAI's DPO format): the right
    count preferred over one number too many or too few."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            start, count = rng.randrange(0, 94), rng.randrange(3, 7)
            wrong = count + rng.choice((1, -1))
            say = lambda k: "Sure:" + "".join(f" {start + i}" for i in range(1, k + 1))
            f.write(json.dumps({
                "input": {"messages": [{"role": "user", "content": f"{count} numbers after {start}"}]},
                "preferred_output": [{"role": "assistant", "content": say(count)}],
                "non_preferred_output": [{"role": "assistant", "content": say(wrong)}],
            }) + "\n")


def chart_data(d, canvas_id):
    """Every dataset of a chart: its label and its points as [x, y]."""
    return d.execute_script(
        "const c = Chart.getChart(document.getElementById(arguments[0]));"
        "return c ? c.data.datasets.map((s) => [s.label, s.data.map((p) => [p.x, p.y])]) : null;",
        canvas_id,
    )


def screenshot(d, shots, name):
    d.execute_script("window.scrollTo(0, 0)")
    time.sleep(0.3)  # the last redraw of the charts (every 250 ms)
    d.save_screenshot(str(shots / f"{name}.png"))


class Steps(list):
    """What passed, each with the seconds since the start."""

    def __init__(self):
        super().__init__()
        self.t0 = time.monotonic()

    def append(self, what):
        super().append(f"{what} ({time.monotonic() - self.t0:.1f} s)")


def run(t, locked, d, shots):
    steps = Steps()
    downloads = t.dir / "downloads"
    downloads.mkdir()
    d.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    train, val = DEMO / "train.jsonl", DEMO / "val.jsonl"

    # ---- headers of the static files and of the API
    status, h, body = t.request("GET", "/", headers={"Authorization": ""})
    check(status == 200 and h["Content-Type"].startswith("text/html"), f"GET /: {status} {h['Content-Type']}")
    csp = h.get("Content-Security-Policy", "")
    for part in ("default-src 'self'", "script-src 'self'", "frame-ancestors 'none'"):
        check(part in csp, f"CSP lacks {part}: {csp}")
    check("unsafe-inline" not in csp and "unsafe-eval" not in csp, f"CSP: {csp}")
    check(h.get("X-Content-Type-Options") == "nosniff", "GET / without nosniff")
    check(b"<script>" not in body and b"style=" not in body, "inline script or style in index.html")
    for f, ctype in (("app.js", "text/javascript"), ("chart.min.js", "text/javascript"), ("style.css", "text/css")):
        status, h, body = t.request("GET", "/ui/" + f)
        check(status == 200 and h["Content-Type"].startswith(ctype), f"/ui/{f}: {status} {h['Content-Type']}")
        check(h.get("X-Content-Type-Options") == "nosniff" and h.get("ETag"), f"/ui/{f}: headers {dict(h)}")
        status2, _, _ = t.request("GET", "/ui/" + f, headers={"If-None-Match": h["ETag"]})
        check(status2 == 304, f"/ui/{f} with its ETag: {status2}")
    check(b"Chart.js v3.9" in t.request("GET", "/ui/chart.min.js")[2][:200], "chart.min.js is not Chart.js 3.9")
    status, _, _ = t.request("GET", "/ui/nope.js")
    check(status == 404, f"/ui/nope.js: {status}")
    status, h, _ = t.request("GET", "/healthz")
    check(h.get("X-Content-Type-Options") == "nosniff", "API replies without nosniff")
    # the static files need no token, the API does
    status, _, _ = locked.request("GET", "/", headers={"Authorization": ""})
    check(status == 200, f"GET / of the tacod with tokens, no token: {status}")
    status, _, _ = locked.request("GET", "/v1/models", headers={"Authorization": ""})
    check(status == 401, f"GET /v1/models, no token: {status}")
    steps.append("headers")

    # ---- a long job made through the API, with markup in its metadata
    tf, vf = t.upload(train), t.upload(val)
    job = t.json("POST", "/v1/fine_tuning/jobs", {
        "model": "tacod-demo", "training_file": tf, "validation_file": vf, "suffix": "api",
        "metadata": {"xss": XSS, "bold": BOLD},
        "hyperparameters": {"batch_size": 16},
        # long enough to be seen training: 100 steps a second on 2 cores
        "taco": {"steps": 20000, "lr": 0.008, "seq_len": 32, "eval_every": 100, "log_every": 5},
    })
    jid = job["id"]
    # a short one on the tacod with tokens, done by the time it is looked at
    ltf = locked.upload(train)
    lid = locked.json("POST", "/v1/fine_tuning/jobs", {
        "model": "tacod-demo", "training_file": ltf, "hyperparameters": {"batch_size": 16},
        "taco": {"steps": 20, "seq_len": 32, "log_every": 5},
    })["id"]

    d.get(t.url + "/")
    row = f'#jobs tr[data-job-id="{jid}"]'
    wait(d, "the job in the list", lambda: d.find_elements(By.CSS_SELECTOR, row))
    wait(d, "the job running in the list", lambda: attr(d, row + " .badge", "data-status") == "running")
    check(text(d, row + " td:nth-child(3)") == "tacod-demo", "model column")
    wait(d, "its progress", lambda: d.find_elements(By.CSS_SELECTOR, row + " progress"))
    Select(d.find_element(By.ID, "status-filter")).select_by_value("succeeded")
    wait(d, "the filter to hide it", lambda: not d.find_elements(By.CSS_SELECTOR, row))
    Select(d.find_element(By.ID, "status-filter")).select_by_value("running")
    wait(d, "the filter to show it", lambda: d.find_elements(By.CSS_SELECTOR, row))
    steps.append("list")

    click(d, row + " a")
    wait(d, "the job page", lambda: shown_status(d) == "running")
    wait(d, "loss points", lambda: points(d, "chart-loss") > 0)
    n1 = points(d, "chart-loss")
    wait(d, "more loss points while it trains", lambda: points(d, "chart-loss") > n1)
    n2 = points(d, "chart-loss")
    check(t.json("GET", f"/v1/fine_tuning/jobs/{jid}")["status"] == "running", "the job stopped too soon")
    wait(d, "a validation point", lambda: points(d, "chart-loss", 1) > 0 and points(d, "chart-acc") > 0)
    steps.append(f"curve {n1} -> {n2} points")

    # markup in the metadata is text
    vals = d.execute_script(
        "const o = {}; for (const e of document.querySelectorAll('#job-info .meta-pair'))"
        " o[e.querySelector('.meta-key').textContent] = e.querySelector('.meta-value').textContent; return o;"
    )
    check(vals == {"xss": XSS, "bold": BOLD}, f"metadata shown as {vals}")
    check(not d.find_elements(By.CSS_SELECTOR, "main img, main b"), "markup of the metadata became elements")
    check(d.execute_script("return window.__xss === undefined"), "the metadata's script ran")
    steps.append("markup as text")

    # zoom: a drag across the loss chart sets its step range
    canvas = d.find_element(By.ID, "chart-loss")
    webdriver.ActionChains(d).move_to_element_with_offset(canvas, -100, 0).click_and_hold() \
        .move_by_offset(150, 0).release().perform()
    zoomed = d.execute_script("const s = Chart.getChart(document.getElementById('chart-loss')).options.scales.x;"
                              "return [s.min, s.max];")
    check(zoomed[0] is not None and zoomed[1] is not None and zoomed[0] < zoomed[1], f"zoom: {zoomed}")
    d.execute_script("document.getElementById('chart-loss').dispatchEvent(new MouseEvent('dblclick'))")
    check(d.execute_script("return Chart.getChart(document.getElementById('chart-loss')).options.scales.x.min")
          is None, "double-click did not reset the zoom")
    steps.append("zoom")
    screenshot(d, shots, "job-running")

    # ---- the device page lists it
    d.get(t.url + "/#/device")
    wait(d, "the device page", lambda: d.find_elements(By.CSS_SELECTOR, f'#running a[href="#/job/{jid}"]'))
    check(d.find_elements(By.ID, "gauge"), "no memory gauge")
    screenshot(d, shots, "device")
    steps.append("device")

    # ---- pause, resume and cancel from its page
    d.get(t.url + f"/#/job/{jid}")
    wait(d, "the job page again", lambda: shown_status(d) == "running")
    click(d, "#job-pause")
    wait(d, "paused", lambda: shown_status(d) == "paused", timeout=45 * SCALE)
    check(attr(d, "#job-resume", "disabled") is None and attr(d, "#job-pause", "disabled") is not None,
          "a paused job offers resume, not pause")
    click(d, "#job-resume")
    wait(d, "running again", lambda: shown_status(d) == "running", timeout=45 * SCALE)
    steps.append("pause, resume")
    click(d, "#job-cancel")
    wait(d, "cancelled", lambda: shown_status(d) == "cancelled", timeout=45 * SCALE)
    check(t.json("GET", f"/v1/fine_tuning/jobs/{jid}")["status"] == "cancelled", "the API disagrees")
    check(attr(d, "#job-cancel", "disabled") is not None, "cancel still offered")
    steps.append("cancel")

    # ---- a job through the form
    d.get(t.url + "/#/new")
    # the base model first; the fine-tuned models (of the jobs that
    # succeeded above, if any) in their group after it
    wait(d, "the models", lambda: [o.get_attribute("value") for o in
                                   d.find_elements(By.CSS_SELECTOR, "#model > option")] == ["tacod-demo"])
    tuned = [o.get_attribute("value") for o in d.find_elements(By.CSS_SELECTOR, "#model optgroup option")]
    check(all(m.startswith("ft:tacod-demo:") for m in tuned), f"fine-tuned models offered: {tuned}")
    d.find_element(By.ID, "train-file").send_keys(str(train))
    d.find_element(By.ID, "val-file").send_keys(str(val))
    Select(d.find_element(By.ID, "model")).select_by_value("tacod-demo")
    for field, value in (("opt-batch", "16"), ("opt-steps", "600"), ("opt-lr", "0.008"), ("opt-seq", "32"),
                         ("opt-eval-every", "50"), ("opt-log-every", "5"), ("opt-ckpt-every", "200"),
                         ("opt-suffix", "form")):
        d.find_element(By.ID, field).send_keys(value)
    d.find_element(By.ID, "opt-metadata").send_keys("from=the form")
    d.find_element(By.ID, "plan-button").click()
    wait(d, "the plan", lambda: d.find_elements(By.ID, "plan-fits"))
    check(d.find_element(By.ID, "plan-fits").text.startswith("Fits"), d.find_element(By.ID, "plan-fits").text)
    nterms = d.execute_script("return Chart.getChart(document.getElementById('plan-bar')).data.datasets.length")
    check(nterms >= 3, f"plan bar with {nterms} terms")
    settings = d.find_element(By.ID, "plan-settings").text
    check(settings.startswith("Settings: precision ") and "streamed" not in settings, f"settings: {settings}")
    report = d.find_element(By.ID, "plan-report").text
    check("no problems in 2000 lines" in report, f"report: {report}")
    # the first chat as the model sees it: the answer and its end of turn highlighted
    marks = [m.text for m in d.find_elements(By.CSS_SELECTOR, "#plan-report pre.chat-preview mark.trained")]
    check(len(marks) == 1 and marks[0].startswith("Sure:") and marks[0].endswith("<|im_end|>"), f"preview marks: {marks}")
    screenshot(d, shots, "new-job")
    before = {j["id"] for j in t.json("GET", "/v1/fine_tuning/jobs")["data"]}
    d.find_element(By.ID, "create-button").click()
    wait(d, "the new job's page", lambda: "#/job/ftjob-" in d.current_url)
    wait(d, "the job's first chat as the model sees it",
         lambda: [m for m in d.find_elements(By.CSS_SELECTOR, "#job-preview pre.chat-preview mark.trained")
                  if m.text.endswith("<|im_end|>")])
    fid = d.current_url.split("#/job/")[1]
    check(fid not in before, "no new job")
    fjob = t.json("GET", f"/v1/fine_tuning/jobs/{fid}")
    check(fjob["hyperparameters"]["batch_size"] == 16 and fjob["taco"]["steps"] == 600
          and fjob["user_provided_suffix"] == "form" and fjob["metadata"] == {"from": "the form"}
          and fjob["validation_file"], f"the form's job: {fjob}")
    # 600 steps: about 8 s on 2 cores, a minute under the sanitizers
    wait(d, "it to succeed", lambda: shown_status(d) == "succeeded", timeout=90 * SCALE)
    # the final model's download button saves the model's tar
    model_tar = f"{fid}-model.tar"
    wait(d, "its final model", lambda: d.find_elements(By.CSS_SELECTOR, f'#checkpoints button[data-file="{model_tar}"]'))
    check(len(d.find_elements(By.CSS_SELECTOR, "#checkpoints button.download")) == 3, "final model and 2 checkpoints")
    click(d, f'#checkpoints button[data-file="{model_tar}"]')

    wait(d, "the download of the model", lambda: saved_models(downloads) == 1)
    check(points(d, "chart-loss") >= 100, f"{points(d, 'chart-loss')} loss points of 120")
    check(points(d, "chart-acc") >= 12, f"{points(d, 'chart-acc')} accuracy points of 12")
    wait(d, "every event", lambda: "successfully completed" in text(d, "#events"))
    screenshot(d, shots, "job")
    steps.append("form job succeeded, model downloaded")

    # evaluation's answers: a table an evaluation, holding exactly its
    # event's samples, and the exact-match series its val_exact_match
    evals, after = [], None
    while True:
        page = t.json("GET", f"/v1/fine_tuning/jobs/{fid}/events?limit=100" + (f"&after={after}" if after else ""))
        evals += [e["data"] for e in page["data"] if e["type"] == "metrics" and e["data"].get("event") == "eval"]
        if not page["has_more"]:
            break
        after = page["data"][-1]["id"]
    check(len(evals) == 12 and all(len(e["samples"]) == 4 for e in evals), f"{len(evals)} evaluations with samples")
    shown = d.execute_script(
        "return [...document.querySelectorAll('#samples-list details')].map((x) => [Number(x.dataset.step),"
        " [...x.querySelectorAll('tbody tr')].map((r) => [...r.children].map((c) => c.textContent))])")
    want = sorted(([e["step"], [[s["prompt"], s["reference"], s["answer"], "yes" if s["match"] else "no"]
                               for s in e["samples"]]] for e in evals), key=lambda x: -x[0])
    check(shown == want, f"the samples tables: {shown[:1]} against the events' {want[:1]}")
    exact = chart_data(d, "chart-acc")[2]
    check(exact == ["exact match", [[e["step"], e["val_exact_match"]] for e in sorted(evals, key=lambda e: e["step"])]],
          f"exact-match series {exact}")
    steps.append(f"evaluation samples ({evals[-1]['val_exact_match']:.2f} exact at the end)")

    # the playground: the base model and the form job's side by side on
    # one prompt, each answer what the API answers
    tuned = t.json("GET", f"/v1/fine_tuning/jobs/{fid}")["fine_tuned_model"]
    d.get(t.url + "/#/playground")
    wait(d, "the playground's models", lambda: tuned in [o.get_attribute("value") for o in
                                                          d.find_elements(By.CSS_SELECTOR, "#pg-model-2 option")])
    Select(d.find_element(By.ID, "pg-model-1")).select_by_value("tacod-demo")
    d.find_element(By.ID, "pg-compare").click()
    Select(d.find_element(By.ID, "pg-model-2")).select_by_value(tuned)
    d.find_element(By.ID, "pg-max-tokens").clear()
    d.find_element(By.ID, "pg-max-tokens").send_keys("24")
    d.find_element(By.ID, "pg-prompt").send_keys("4 numbers after 35")
    click(d, "#pg-send")
    wait(d, "both answers", lambda: len(d.find_elements(By.CSS_SELECTOR, ".pg-msg.assistant[data-state=done]")) == 2,
         timeout=60 * SCALE)
    shown = [d.execute_script("return document.querySelector(arguments[0]).textContent",
                              f"#pg-col-{i} .pg-msg.assistant .pg-text") for i in (1, 2)]
    want = [t.json("POST", "/v1/chat/completions", {
        "model": m, "messages": [{"role": "user", "content": "4 numbers after 35"}], "temperature": 0,
        "max_tokens": 24})["choices"][0]["message"]["content"] for m in ("tacod-demo", tuned)]
    check(shown == want and shown[0] != shown[1], f"the playground shows {shown}, the API answers {want}")
    screenshot(d, shots, "playground")
    steps.append(f"playground: {tuned} answers {shown[1]!r}")
    d.get(t.url + f"/#/job/{fid}")
    wait(d, "the form job's page again", lambda: shown_status(d) == "succeeded"
         and d.find_elements(By.CSS_SELECTOR, f'#checkpoints button[data-file="{model_tar}"]'))

    # GGUF for llama.cpp: the final model's GGUF button converts it in
    # tacod (a taco-train child), the list shows the file, and its
    # Download button saves it under the server's name
    Select(d.find_element(By.ID, "gguf-type")).select_by_value("q8_0")
    click(d, '#checkpoints button.gguf-convert[data-source="model"]')
    gguf_name = f"{fid[len('ftjob-'):]}-model-q8_0.gguf"
    wait(d, "the GGUF file", lambda: d.find_elements(By.CSS_SELECTOR, f'#gguf button[data-file="{gguf_name}"]'),
         timeout=60 * SCALE)
    want = t.json("GET", f"/v1/fine_tuning/jobs/{fid}/gguf/model-q8_0.gguf")
    check(want["status"] == "succeeded" and want["type"] == "q8_0", f"the GGUF: {want}")
    click(d, f'#gguf button[data-file="{gguf_name}"]')
    saved = downloads / gguf_name
    wait(d, "the download of the GGUF", lambda: saved.is_file() and saved.stat().st_size == want["bytes"])
    check(saved.read_bytes()[:4] == b"GGUF", "the saved file is not a GGUF file")
    steps.append("GGUF converted and downloaded")

    d.get(t.url + "/#/jobs")
    wait(d, "both jobs", lambda: len(d.find_elements(By.CSS_SELECTOR, "#jobs tr[data-job-id]")) == 2)
    screenshot(d, shots, "jobs")

    # ---- DPO through the form, from the model the form's job made
    tuned = t.json("GET", f"/v1/fine_tuning/jobs/{fid}")["fine_tuned_model"]
    d.get(t.url + "/#/new")
    wait(d, "the fine-tuned model offered",
         lambda: tuned in [o.get_attribute("value") for o in d.find_elements(By.CSS_SELECTOR, "#model optgroup option")])
    d.find_element(By.ID, "train-file").send_keys(str(DEMO / "pref_train.jsonl"))
    d.find_element(By.ID, "val-file").send_keys(str(DEMO / "pref_val.jsonl"))
    Select(d.find_element(By.ID, "model")).select_by_value(tuned)
    check(not d.find_element(By.ID, "opt-beta").is_displayed(), "beta shown for a supervised job")
    Select(d.find_element(By.ID, "opt-method")).select_by_value("dpo")
    for field, value in (("opt-beta", "0.1"), ("opt-batch", "8"), ("opt-steps", "60"), ("opt-lr", "0.00003"),
                         ("opt-seq", "32"), ("opt-eval-every", "20"), ("opt-log-every", "5")):
        d.find_element(By.ID, field).send_keys(value)
    d.find_element(By.ID, "plan-button").click()
    wait(d, "the DPO plan", lambda: d.find_elements(By.ID, "plan-report"))
    report = d.find_element(By.ID, "plan-report").text
    check("pairs 1000" in report, f"DPO report: {report}")
    before = {j["id"] for j in t.json("GET", "/v1/fine_tuning/jobs")["data"]}
    d.find_element(By.ID, "create-button").click()
    wait(d, "the DPO job's page", lambda: "#/job/ftjob-" in d.current_url and d.current_url.split("#/job/")[1] not in before)
    did = d.current_url.split("#/job/")[1]
    djob = t.json("GET", f"/v1/fine_tuning/jobs/{did}")
    check(djob["method"] == {"type": "dpo", "dpo": {"hyperparameters": {
        "beta": 0.1, "batch_size": 8, "n_epochs": None, "learning_rate_multiplier": None}}}
          and djob["model"] == tuned, f"the DPO job: {djob['method']}, {djob['model']}")
    wait(d, "the DPO job to succeed", lambda: shown_status(d) == "succeeded", timeout=90 * SCALE)
    wait(d, "its evaluations", lambda: points(d, "chart-reward-acc", 1) >= 3)
    check(d.find_element(By.ID, "chart-reward-acc").is_displayed() and d.find_element(By.ID, "chart-rewards").is_displayed()
          and not d.find_element(By.ID, "chart-acc").is_displayed(), "DPO charts in place of the token accuracy")
    check(text(d, "#job-method") == "DPO, beta 0.1", f"the method shown as {text(d, '#job-method')!r}")
    ytitle = d.execute_script("return Chart.getChart(document.getElementById('chart-loss')).options.scales.y.title.text")
    check(ytitle == "DPO loss", f"the loss chart's axis: {ytitle}")
    # every series of the charts holds its events' values, step by step
    events = t.json("GET", f"/v1/fine_tuning/jobs/{did}/events?limit=100")
    check(not events["has_more"], "more than 100 events")
    metrics = [e["data"] for e in events["data"] if e["type"] == "metrics"]
    train = sorted((m for m in metrics if "event" not in m), key=lambda m: m["step"])
    evals = sorted((m for m in metrics if m.get("event") == "eval"), key=lambda m: m["step"])
    check(len(train) == 12 and len(evals) == 3, f"{len(train)} training and {len(evals)} evaluation events")

    def series(label, rows, key):
        return [label, [[r["step"], r[key]] for r in rows]]

    pair_keys = ("rewards/chosen", "rewards/rejected", "rewards/margins")
    want = {
        "chart-loss": [series("training loss", train, "train_loss"), series("validation loss", evals, "val_loss")],
        "chart-reward-acc": [series("training pairs", train, "rewards/accuracies"),
                             series("validation pairs", evals, "val_rewards/accuracies")],
        "chart-rewards": [series(k, train, key) for k, key in zip(("chosen", "rejected", "margin"), pair_keys)]
        + [series("validation " + k, evals, "val_" + key) for k, key in zip(("chosen", "rejected", "margin"), pair_keys)],
    }
    for canvas, datasets in want.items():
        got = chart_data(d, canvas)
        check(got == datasets, f"{canvas}: {got} against the events' {datasets}")
    last = evals[-1]
    check(last["val_rewards/accuracies"] >= 0.9 and last["val_rewards/margins"] > 0,
          f"held-out reward accuracy and margin: {last}")
    check("Reference log-probs (train): 1000/1000 pairs" in text(d, "#events")
          and "Reference log-probs (validation): 48/48 pairs" in text(d, "#events"), "the reference pass's events")
    screenshot(d, shots, "job-dpo")
    steps.append(f"DPO job through the form: held-out reward accuracy {last['val_rewards/accuracies']:.0%}")

    # the reference pass while it runs, before the first step: 8000
    # validation pairs take it seconds past the end of the training set's
    # (its first event); then cancelled
    ptrain, pval = t.dir / "pref_train.jsonl", t.dir / "pref_val_big.jsonl"
    write_pairs(ptrain, 64, 1)
    write_pairs(pval, 8000, 2)
    rid = t.json("POST", "/v1/fine_tuning/jobs", {
        "model": "tacod-demo", "training_file": t.upload(ptrain), "validation_file": t.upload(pval),
        "method": {"type": "dpo"}, "taco": {"steps": 2, "seq_len": 32},
    })["id"]
    d.get(t.url + f"/#/job/{rid}")
    wait(d, "the reference pass running", lambda: text(d, "#st-step") == "reference (train) 64 / 64 pairs")
    # (the badge follows the job's poll, every 2 s)
    check(t.json("GET", f"/v1/fine_tuning/jobs/{rid}")["status"] == "running" and points(d, "chart-loss") == 0,
          "the reference pass shown after a step")
    # the log is redrawn every 250 ms
    wait(d, "the reference event listed", lambda: "Reference log-probs (train): 64/64 pairs" in text(d, "#events"))
    check("(validation)" not in text(d, "#events") and text(d, "#st-step") == "reference (train) 64 / 64 pairs",
          f"events: {text(d, '#events')}")
    t.json("POST", f"/v1/fine_tuning/jobs/{rid}/cancel", {})
    wait(d, "it cancelled", lambda: shown_status(d) == "cancelled", timeout=45 * SCALE)
    steps.append("a reference pass shown while it runs")

    # ---- a token prompt for a tacod with a tokens file
    d.get(locked.url + "/")
    dialog = d.find_element(By.ID, "token-dialog")
    wait(d, "the token prompt", lambda: dialog.is_displayed())
    screenshot(d, shots, "token")
    d.find_element(By.ID, "token-input").send_keys(TOKEN)
    d.find_element(By.ID, "token-save").click()
    wait(d, "the list with the token", lambda: d.find_elements(By.CSS_SELECTOR, "#jobs tbody tr"))
    check(not dialog.is_displayed(), "the prompt stayed")
    check(d.execute_script("return sessionStorage.getItem('tacod.token')") == TOKEN, "token not kept")
    check(d.execute_script("return document.cookie") == "", "a cookie was set")
    # with the token, a download goes through fetch (it carries the header)
    d.get(locked.url + f"/#/job/{lid}")
    wait(d, "the job with tokens done", lambda: shown_status(d) == "succeeded")
    wait(d, "its model", lambda: d.find_elements(By.CSS_SELECTOR, f'#checkpoints button[data-file="{lid}-model.tar"]'))
    click(d, f'#checkpoints button[data-file="{lid}-model.tar"]')
    wait(d, "the download with the token", lambda: saved_models(downloads) == 2)
    dialog = d.find_element(By.ID, "token-dialog")
    check(not dialog.is_displayed(), "the prompt came back with a good token")
    d.execute_script("sessionStorage.setItem('tacod.token', 'wrong'); location.hash = '#/device'")
    wait(d, "the prompt for a wrong token", lambda: dialog.is_displayed())
    check("Incorrect API key" in d.find_element(By.ID, "token-why").text, d.find_element(By.ID, "token-why").text)
    steps.append("token prompt, download with the token")

    # no error from the page itself (CSP violations are logged as errors)
    logs = [e for e in d.get_log("browser") if e["level"] == "SEVERE" and "401" not in e["message"]]
    check(not logs, f"browser console errors: {logs}")
    return steps


def main():
    bin_dir = os.environ.get("TACO_BIN_DIR", str(ROOT / "build"))
    shots = Path(os.environ.get("TACO_SCREENSHOT_DIR", str(Path(bin_dir) / "dashboard")))
    shots.mkdir(parents=True, exist_ok=True)
    (shots / "failure.png").unlink(missing_ok=True)
    t0 = time.monotonic()
    t = locked = d = None
    try:
        t = Tacod(bin_dir)
        locked = Tacod(bin_dir, tokens=True)
        d = browser()
        steps = run(t, locked, d, shots)
    except Exception:
        for name, x in (("tacod", t), ("tacod with tokens", locked)):
            if x:
                print(f"---- {name} log\n{x.log_tail()}", file=sys.stderr)
        if d:
            try:
                d.save_screenshot(str(shots / "failure.png"))
                print(f"---- screenshot of the failure: {shots / 'failure.png'}", file=sys.stderr)
                for e in d.get_log("browser"):
                    print("browser:", e, file=sys.stderr)
            except Exception:
                pass
        raise
    finally:
        if d:
            d.quit()
        for x in (t, locked):
            if x:
                x.stop()
    print(f"browser_dashboard: ok in {time.monotonic() - t0:.1f} s: " + ", ".join(steps))
    print(f"screenshots in {shots}")


if __name__ == "__main__":
    main()
