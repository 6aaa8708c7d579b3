#!/usr/bin/env python3
"""bench_smoke.py FIELDS -- CMD...: runs a benchmark that prints one JSON
line, for a ctest smoke run (bench timings are never pass/fail).

Passes when CMD exits 0 and its last stdout line is a JSON object without
"error" in which every FIELD (comma-separated) is a finite number > 0, or,
written NAME=null, is present and null.
"""
import json
import math
import subprocess
import sys


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    fields, cmd = sys.argv[1].split(","), sys.argv[3:]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=600)
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    print(p.stdout, end="")
    if p.returncode != 0 or not lines:
        print("FAIL: exit status %d, %d lines" % (p.returncode, len(lines)))
        return 1
    try:
        d = json.loads(lines[-1])
    except ValueError as e:
        print("FAIL: the last line is not JSON: %s" % e)
        return 1
    bad = []
    if not isinstance(d, dict) or "error" in d:
        bad.append("not an object without error")
    else:
        for f in fields:
            name, _, want = f.partition("=")
            v = d.get(name, "missing")
            if want == "null":
                if v is not None:
                    bad.append("%s: %r, not null" % (name, v))
            elif (isinstance(v, bool) or not isinstance(v, (int, float)) or
                  not math.isfinite(v) or v <= 0):
                bad.append("%s: %r, not a number > 0" % (name, v))
    if bad:
        print("FAIL: " + "; ".join(bad))
        return 1
    print("ok: " + ", ".join(fields))
    return 0


if __name__ == "__main__":
    sys.exit(main())
