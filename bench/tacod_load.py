#!/usr/bin/env python3
"""tacod under load while a job trains (bench, not a test).

Starts the real tacod from a build directory with the fixture models, runs a
long training job, and measures, side by side in one invocation:
  1. the job alone: its tokens/s (the reference);
  2. GET requests paced at --rate per second by wrk: latency p50/p99 and
     throughput, and the job's tokens/s meanwhile;
  3. --sse clients following the job's event stream: events delivered, and
     the job's tokens/s meanwhile.
Prints one table with the ratios to the job alone. Needs wrk (apt install
wrk); stdlib Python only.
"""
import argparse, json, os, re, shutil, socket, subprocess, sys, tempfile
import threading, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def req(base, method, path, body=None, ctype="application/json"):
    r = urllib.request.Request(base + path, data=body, method=method)
    if body is not None:
        r.add_header("Content-Type", ctype)
    with urllib.request.urlopen(r, timeout=30) as f:
        return json.loads(f.read())


def upload(base, path):
    b = "tacodbench"
    data = open(path, "rb").read()
    body = (f"--{b}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
            f"fine-tune\r\n--{b}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"train.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n").encode()
    body += data + f"\r\n--{b}--\r\n".encode()
    return req(base, "POST", "/v1/files", body, f"multipart/form-data; boundary={b}")


def cpu_s(pid):
    """User + system CPU seconds of a process so far."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


TACOD_PID = None


def sample_tokens(base, job, seconds):
    """Mean tokens/s of the job over `seconds`, from its trained_tokens,
    and tacod's own CPU use meanwhile (cores)."""
    j0 = req(base, "GET", f"/v1/fine_tuning/jobs/{job}")
    c0 = cpu_s(TACOD_PID)
    t0 = time.time()
    time.sleep(seconds)
    j1 = req(base, "GET", f"/v1/fine_tuning/jobs/{job}")
    t1 = time.time()
    c1 = cpu_s(TACOD_PID)
    return (((j1["trained_tokens"] or 0) - (j0["trained_tokens"] or 0)) / (t1 - t0),
            (c1 - c0) / (t1 - t0))


def sse_client(port, job, stop, counts, i):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(f"GET /v1/fine_tuning/jobs/{job}/events?stream=true HTTP/1.1\r\n"
              f"Host: x\r\n\r\n".encode())
    s.settimeout(0.5)
    n = 0
    while not stop.is_set():
        try:
            d = s.recv(65536)
        except socket.timeout:
            continue
        if not d:
            break
        n += d.count(b"\nevent: ")
    counts[i] = n
    s.close()


def parse_wrk(text):
    def ms(v, unit):
        return float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    lat = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", text, re.M))
    out = {}
    for k, v in lat.items():
        m = re.match(r"([\d.]+)(us|ms|s)", v)
        out["p" + k] = ms(m.group(1), m.group(2))
    m = re.search(r"Requests/sec:\s+([\d.]+)", text)
    out["rps"] = float(m.group(1)) if m else 0.0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    out["non2xx"] = int(m.group(1)) if m else 0
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--sse", type=int, default=200)
    ap.add_argument("--seq-len", type=int, default=256)
    a = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("tacod_load: wrk is not installed (apt install wrk)")
    tmp = tempfile.mkdtemp(prefix="tacod-load-")
    port = free_port()
    cfg = os.path.join(tmp, "tacod.json")
    json.dump({"listen": f"127.0.0.1:{port}", "state_dir": os.path.join(tmp, "state"),
               "models_dir": os.path.join(ROOT, "tests/fixtures/models"),
               "taco_train": os.path.join(a.build, "taco-train"),
               # every client of the bench comes from 127.0.0.1: the
               # per-client cap (32 by default) would refuse the 200
               # event streams with 429
               "limits": {"max_connections": 1024,
                          "max_connections_per_client": 1024}}, open(cfg, "w"))
    d = subprocess.Popen([os.path.join(a.build, "tacod"), "--config", cfg],
                         stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    global TACOD_PID
    TACOD_PID = d.pid
    try:
        for _ in range(100):
            try:
                req(base, "GET", "/healthz")
                break
            except OSError:
                time.sleep(0.1)
        f = upload(base, os.path.join(ROOT, "tests/fixtures/data/count_train.jsonl"))
        job = req(base, "POST", "/v1/fine_tuning/jobs", json.dumps({
            "model": "llama_gqa", "training_file": f["id"],
            "taco": {"steps": 10000000, "seq_len": a.seq_len, "packing": True,
                     "checkpoint_every": 1000000, "log_every": 1}}).encode())["id"]
        while req(base, "GET", f"/v1/fine_tuning/jobs/{job}")["status"] != "running":
            time.sleep(0.2)
        time.sleep(3)  # past start-up
        alone = sample_tokens(base, job, a.seconds)

        conns = max(1, a.rate // 100)  # 10 ms apart on each connection
        # the delay runs after each reply: a little under 1/rate keeps the
        # offered load at about --rate
        env = dict(os.environ, TACOD_DELAY_MS=str(int(900 * conns / a.rate)))
        w = subprocess.Popen(["wrk", "-t2", f"-c{conns}", f"-d{a.seconds}s", "--latency",
                              "-s", os.path.join(ROOT, "bench/wrk_delay.lua"),
                              f"{base}/v1/fine_tuning/jobs/{job}"],
                             stdout=subprocess.PIPE, text=True, env=env)
        w0 = cpu_s(w.pid)
        under_get = sample_tokens(base, job, a.seconds - 1)
        gen_get = (cpu_s(w.pid) - w0) / (a.seconds - 1)
        wrk = parse_wrk(w.communicate()[0])

        stop = threading.Event()
        counts = [0] * a.sse
        th = [threading.Thread(target=sse_client, args=(port, job, stop, counts, i))
              for i in range(a.sse)]
        for t in th:
            t.start()
        time.sleep(1)
        p0 = cpu_s(os.getpid())
        under_sse = sample_tokens(base, job, a.seconds)
        gen_sse = (cpu_s(os.getpid()) - p0) / a.seconds
        stop.set()
        for t in th:
            t.join()
        req(base, "POST", f"/v1/fine_tuning/jobs/{job}/cancel", b"{}")
    finally:
        d.terminate()
        d.wait(timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"tacod under load, {a.seconds} s per phase, job: llama_gqa fixture, "
          f"seq_len {a.seq_len}, {os.cpu_count()} cores")
    print(f"| phase | requests/s | p50 ms | p99 ms | job tokens/s | vs job alone | tacod CPU (cores) | load generator CPU (cores) |")
    print(f"| --- | --- | --- | --- | --- | --- | --- | --- |")
    print(f"| job alone (reference) | - | - | - | {alone[0]:.0f} | 1.000 | {alone[1]:.3f} | - |")
    print(f"| GET /v1/fine_tuning/jobs/ID paced at {a.rate}/s | {wrk['rps']:.0f} | "
          f"{wrk.get('p50', 0):.2f} | {wrk.get('p99', 0):.2f} | {under_get[0]:.0f} | "
          f"{under_get[0] / alone[0]:.3f} | {under_get[1]:.3f} | {gen_get:.3f} (wrk) |")
    print(f"| {a.sse} SSE clients on the job's events | - | - | - | {under_sse[0]:.0f} | "
          f"{under_sse[0] / alone[0]:.3f} | {under_sse[1]:.3f} | {gen_sse:.3f} (Python clients) |")
    print(f"SSE: {sum(1 for c in counts if c > 0)}/{a.sse} clients received events, "
          f"{min(counts)}..{max(counts)} events each; wrk non-2xx: {wrk['non2xx']}")


if __name__ == "__main__":
    main()
