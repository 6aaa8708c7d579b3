#!/usr/bin/env python3
"""ctest_skips.py JUNIT_XML: lists the tests that ctest skipped, with the
reason each printed, and fails when one was skipped for any reason but the
lack of a GPU (a CUDA test on a machine without one). A skip is otherwise
a check that did not run, and "all tests passed" must not hide it."""
import re
import sys
import xml.etree.ElementTree as ET

NO_GPU = re.compile(r'skipped: no (usable CUDA driver or device|GPU)')


def main():
    root = ET.parse(sys.argv[1]).getroot()
    bad = 0
    for case in root.iter('testcase'):
        if case.find('skipped') is None and case.get('status') != 'notrun':
            continue
        out = (case.findtext('system-out') or '').strip()
        reason = next((l for l in out.splitlines() if 'skipped' in l),
                      out.splitlines()[-1] if out else 'no output')
        ok = NO_GPU.search(out) is not None
        print(f"skipped: {case.get('name')}: {reason}"
              f"{'' if ok else '   <- not a missing GPU: a failure'}")
        bad += not ok
    if bad:
        print(f'{bad} test(s) skipped for a reason other than a missing GPU',
              file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
