#!/usr/bin/env python3
"""check_links.py: a library links no project library but those allowed.

LINKS is the file CMake writes at generation (tests/CMakeLists.txt): one
line per library of the project, "name: its INTERFACE_LINK_LIBRARIES"
(';'-separated), the libraries that whatever links it links too. The
check follows them from TARGET, library after library, and fails on any
project library reached that is not among ALLOWED; libraries of the
system (PkgConfig::JANSSON, m) are not followed.

Usage: check_links.py LINKS TARGET [ALLOWED ...]
       check_links.py --self-test   (the check finds planted links)"""
import re
import sys

LINK_ONLY = re.compile(r'^\$<LINK_ONLY:(.*)>$')


def read_links(path):
    links = {}
    for n, line in enumerate(open(path), 1):
        if not line.strip():
            continue
        name, sep, deps = line.partition(':')
        if not sep:
            sys.exit(f'{path}:{n}: not "name: libraries"')
        links[name.strip()] = [LINK_ONLY.sub(r'\1', d.strip())
                               for d in deps.split(';') if d.strip()]
    return links


def check(links, target, allowed):
    """The problems: each library reached from target that is not allowed,
    with the chain of links that reaches it."""
    if target not in links:
        return [f'{target}: not a library of the project']
    errors, seen, queue = [], {target}, [(target, [target])]
    while queue:
        name, chain = queue.pop(0)
        for dep in links[name]:
            if dep in seen or dep not in links:
                continue  # a system library: not ours to follow
            seen.add(dep)
            if dep not in allowed:
                errors.append(f'{target} links {dep} through '
                              f'{" -> ".join(chain + [dep])}')
            queue.append((dep, chain + [dep]))
    return errors


SELF_TEST_LINKS = {
    'tacoapi': ['taco_job', 'PkgConfig::JANSSON'],
    'taco_job': ['taco_util', '$<LINK_ONLY:taco_optim>'],
    'taco_util': ['PkgConfig::JANSSON'],
    'taco_optim': ['taco_model', 'taco_job'],
    'taco_model': ['taco_util', 'tk_headers', 'm'],
    'tk_headers': [],
}
SELF_TEST_EXPECT = [
    'tacoapi links taco_optim through tacoapi -> taco_job -> taco_optim',
    'tacoapi links taco_model through tacoapi -> taco_job -> taco_optim -> '
    'taco_model',
    'tacoapi links tk_headers through tacoapi -> taco_job -> taco_optim -> '
    'taco_model -> tk_headers',
]


def self_test():
    links = {k: [LINK_ONLY.sub(r'\1', d) for d in v]
             for k, v in SELF_TEST_LINKS.items()}
    got = check(links, 'tacoapi', {'taco_job', 'taco_util'})
    clean = dict(links, taco_job=['taco_util'])
    ok = got == SELF_TEST_EXPECT and \
        check(clean, 'tacoapi', {'taco_job', 'taco_util'}) == [] and \
        check(links, 'nothere', set()) != []
    for g in got:
        print(g)
    print('self-test', 'passed' if ok else 'FAILED')
    return 0 if ok else 1


def main():
    if len(sys.argv) == 2 and sys.argv[1] == '--self-test':
        return self_test()
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    links = read_links(sys.argv[1])
    target, allowed = sys.argv[2], set(sys.argv[3:])
    errors = check(links, target, allowed)
    for e in errors:
        print(e)
    if errors:
        print(f'{target} may link only {" ".join(sorted(allowed))} of the '
              'project\'s libraries')
        return 1
    print(f'{target} links only {" ".join(sorted(allowed))} of the '
          'project\'s libraries')
    return 0


if __name__ == '__main__':
    sys.exit(main())
