#!/usr/bin/env python3
"""check_layers.py: every quoted #include follows the layers that
docs/architecture.md lists in its ```layers block.

A module's line names the modules it may include, and, each marked with
'!', the modules it may not reach at all, not even through the headers it
may include: "api: engine/util engine/job !kernels" holds every header
that api's files reach, include after include, to no kernels header (so
api compiles with kernels/ off its include path).

A quoted include resolves as the compiler resolves it: first beside the
including file, then from engine/ ("model/model.h"), then from the
repository root ("daemon/store/store.h"), then from kernels/ ("tk_ops.h"). An
include that resolves nowhere is an error (a bare name that only some
other folder's include path would find), and so is one that reaches a
module the including module may not use. Backend headers (<cblas.h>,
<omp.h>, CUDA's) may be included only in kernels/ (and by the tests and
benchmarks that drive a backend).

Usage: check_layers.py REPO_ROOT
       check_layers.py --self-test   (the check finds planted violations)"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCES = ('.c', '.h', '.cu', '.cuh', '.cpp')
SCANNED = ('engine', 'kernels', 'api', 'daemon', 'client', 'tests', 'bench')
BACKEND = re.compile(r'^(cblas\.h|omp\.h|cuda.*\.h|cublas.*\.h|cudnn.*\.h)$')
BACKEND_OK = ('kernels', 'tests', 'bench')  # tests and benchmarks drive one


def read_layers(root):
    text = open(os.path.join(root, 'docs', 'architecture.md')).read()
    m = re.search(r'^```layers\n(.*?)^```', text, re.S | re.M)
    if not m:
        sys.exit('docs/architecture.md: no ```layers block')
    allowed, never = {}, {}
    for n, line in enumerate(m.group(1).splitlines(), 1):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        name, _, deps = line.partition(':')
        name = name.strip()
        allowed[name] = {d for d in deps.split() if not d.startswith('!')}
        never[name] = {d[1:] for d in deps.split() if d.startswith('!')}
    for name in allowed:
        for d in allowed[name] | never[name]:
            if d != '*' and d not in allowed:
                sys.exit(f'docs/architecture.md: {name} uses unknown {d}')
        if never[name] & allowed[name]:
            sys.exit(f'docs/architecture.md: {name} both uses and may not '
                     f'reach {" ".join(sorted(never[name] & allowed[name]))}')
    cycle = find_cycle(allowed)
    if cycle:
        sys.exit('docs/architecture.md: the layers go in a circle: ' +
                 ' -> '.join(cycle))
    return allowed, never


def module_of(rel):
    """engine/<library> and daemon/<room> are modules of their own; the
    files at the top of engine/ and daemon/ (the programs) are engine and
    daemon."""
    parts = rel.split('/')
    if parts[0] in ('engine', 'daemon'):
        return parts[0] + '/' + parts[1] if len(parts) > 2 else parts[0]
    return parts[0]


def find_cycle(allowed):
    """A circle in the layers (a module that may include itself through
    others), as a list of modules, or None: the rule's arrows go one way,
    so that includes that follow it cannot make a circle."""
    state = {}

    def visit(m, path):
        state[m] = 1
        for d in sorted(allowed.get(m, ())):
            if d == '*' or d == m:
                continue
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state:
                c = visit(d, path + [d])
                if c:
                    return c
        state[m] = 2
        return None

    for m in sorted(allowed):
        if m not in state:
            c = visit(m, [m])
            if c:
                return c
    return None


def resolve(root, rel, name):
    here = os.path.dirname(rel)
    bases = [here, 'engine', '', 'kernels']
    if rel.startswith('tests/'):
        bases.append('tests')  # the tests' own include directory
    for base in bases:
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def reach(graph, start, modules):
    """The shortest include chain from start to a file of each of modules:
    {module: [header, ..., the file in module]}, breadth first."""
    found, seen, queue = {}, {start}, [(start, [])]
    while queue and len(found) < len(modules):
        rel, chain = queue.pop(0)
        for target in graph.get(rel, ()):
            if target in seen:
                continue
            seen.add(target)
            dep = module_of(target)
            if dep in modules and dep not in found:
                found[dep] = chain + [target]
            queue.append((target, chain + [target]))
    return found


def check(root):
    allowed, never = read_layers(root)
    graph = {}  # file -> the files its quoted includes resolve to
    errors = []
    for top in SCANNED:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                mod = module_of(rel)
                if mod not in allowed:
                    errors.append(f'{rel}: module {mod} is not in the layers')
                    continue
                for n, line in enumerate(open(os.path.join(root, rel),
                                              errors='replace'), 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    kind, name = m.groups()
                    close = '>' if kind == '<' else '"'
                    where = f'{rel}:{n}: #include {kind}{name}{close}'
                    if kind == '<':
                        if BACKEND.match(name) and mod not in BACKEND_OK:
                            errors.append(f'{where}: a backend header '
                                          'outside kernels/')
                        continue
                    target = resolve(root, rel, name)
                    if target is None:
                        errors.append(f'{where}: resolves nowhere (qualify '
                                      'it: "model/model.h", "daemon/room/x.h")')
                        continue
                    graph.setdefault(rel, []).append(target)
                    dep = module_of(target)
                    if dep == mod:
                        continue
                    deps = allowed[mod]
                    if '*' not in deps and dep not in deps:
                        errors.append(f'{where}: {mod} may not include '
                                      f'{dep} (docs/architecture.md)')
    for rel in sorted(graph):
        mod = module_of(rel)
        for dep, chain in sorted(reach(graph, rel, never.get(mod, ())).items()):
            errors.append(f'{rel}: reaches {dep} through '
                          f'{" -> ".join(chain)} ({mod} !{dep}, '
                          'docs/architecture.md)')
    return errors


SELF_TEST_TREE = {
    'docs/architecture.md': '```layers\nkernels:\nengine/low:\n'
                            'engine/mid: kernels\n'
                            'engine/high: engine/low\n'
                            'daemon/a:\ndaemon/b: daemon/a\n'
                            'daemon: engine/high engine/mid daemon/b '
                            '!kernels\n'
                            'tests: *\n```\n',
    'daemon/a/a.h': '#include "daemon/b/b.h"\n',              # upward
    'daemon/b/b.h': '#include "daemon/a/a.h"\n',
    'kernels/tk_k.h': '',
    'engine/low/low.h': '#include "high/high.h"\n',      # upward
    'engine/high/high.h': '#include "low/low.h"\n#include "tk_k.h"\n',
    'engine/high/high.c': '#include "high.h"\n#include <cblas.h>\n',
    'engine/mid/mid.h': '#include "tk_k.h"\n',            # allowed there
    'daemon/d.c': '#include "low.h"\n#include "low/low.h"\n',
    'daemon/e.c': '#include "e.h"\n',
    'daemon/e.h': '#include "mid/mid.h"\n',              # two steps away
    'tests/t.c': '#include "daemon/nothere.h"\n#include <omp.h>\n'
                 '#include "mid/mid.h"\n',               # tests may
}
SELF_TEST_EXPECT = [
    'daemon/a/a.h:1: #include "daemon/b/b.h": daemon/a may not include '
    'daemon/b',
    'daemon/d.c: reaches kernels through engine/low/low.h -> '
    'engine/high/high.h -> kernels/tk_k.h (daemon !kernels',
    'daemon/d.c:1: #include "low.h": resolves nowhere',
    'daemon/d.c:2: #include "low/low.h": daemon may not include engine/low',
    'daemon/e.c: reaches kernels through daemon/e.h -> engine/mid/mid.h -> '
    'kernels/tk_k.h (daemon !kernels',
    'daemon/e.h: reaches kernels through engine/mid/mid.h -> '
    'kernels/tk_k.h (daemon !kernels',
    'engine/high/high.c:2: #include <cblas.h>: a backend header',
    'engine/high/high.h:2: #include "tk_k.h": engine/high may not include '
    'kernels',
    'engine/low/low.h:1: #include "high/high.h": engine/low may not include '
    'engine/high',
    'tests/t.c:1: #include "daemon/nothere.h": resolves nowhere',
]


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        for rel, text in SELF_TEST_TREE.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)),
                        exist_ok=True)
            with open(os.path.join(root, rel), 'w') as f:
                f.write(text)
        got = sorted(check(root))
    ok = len(got) == len(SELF_TEST_EXPECT) and all(
        g.startswith(e) for g, e in zip(got, SELF_TEST_EXPECT))
    for g in got:
        print(g)
    # a circle in the rule itself is refused
    circle = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a', '*'}}
    ring = find_cycle(circle)
    print('circle found:', ring)
    ok = ok and ring == ['a', 'b', 'c', 'a'] and \
        find_cycle({'a': {'b'}, 'b': set(), 't': {'*'}}) is None
    print('self-test', 'passed' if ok else 'FAILED')
    return 0 if ok else 1


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if sys.argv[1] == '--self-test':
        return self_test()
    errors = check(sys.argv[1])
    for e in errors:
        print(e)
    if errors:
        print(f'{len(errors)} include(s) against the layers')
        return 1
    print('includes follow the layers')
    return 0


if __name__ == '__main__':
    sys.exit(main())
