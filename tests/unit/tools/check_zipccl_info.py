#!/usr/bin/env python3
"""zipccl-info lists every variable of common/params.def, fails on a bad value naming the
variable and its range, suggests the closest name for a misspelt one, and prints this
process's NUMA node and nearest NIC.

usage: check_zipccl_info.py ZIPCCL_INFO PARAMS_DEF
"""
import os
import re
import subprocess
import sys

failures = []


def check(cond, what, result=None):
    if cond:
        return
    msg = f'FAIL: {what}'
    if result is not None:
        msg += (f'\n  exit status {result.returncode}\n  stdout:\n{indent(result.stdout)}'
                f'\n  stderr:\n{indent(result.stderr)}')
    failures.append(msg)
    print(msg)


def indent(text):
    return '\n'.join('    ' + line for line in text.splitlines()) or '    (empty)'


def run(info, args=(), extra_env=None, cpu=None):
    """Runs zipccl-info with no ZIPCCL_* variable from the caller's environment (bound to
    @cpu when given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('ZIPCCL_')}
    env.update(extra_env or {})
    bind = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    return subprocess.run([info, *args], env=env, capture_output=True, text=True, timeout=30,
                          preexec_fn=bind)


def check_facts(info, fixtures):
    """The "this process:" line: its NUMA node and NIC; from a fixture taken as this machine,
    the node of the CPU it is bound to."""
    r = run(info)
    m = re.search(r'^this process: numa (\d+|-), nic (none|\S+ numa (\d+|-)) \((.*)\)$', r.stdout,
                  flags=re.M)
    check(m is not None, 'zipccl-info prints "this process: numa N, nic NAME numa M (source)"', r)
    if m is None or 'without hwloc' in m.group(4):
        return
    check(m.group(4) == 'hwloc, this machine', 'the facts come from this machine', r)
    fixture = os.path.join(fixtures, '2numa-2pu-nic.xml')
    allowed = os.sched_getaffinity(0)
    for cpu in (0, 1):
        if cpu not in allowed:
            continue
        r = run(info, extra_env={'ZIPCCL_TOPO_XML': fixture}, cpu=cpu)
        want = f'this process: numa {cpu}, nic eth0 numa 1 (hwloc, ZIPCCL_TOPO_XML)'
        check(want in r.stdout, f'bound to cpu {cpu} on {fixture}: "{want}"', r)
    missing = '/no/such/topology.xml'
    r = run(info, extra_env={'ZIPCCL_TOPO_XML': missing})
    check(r.returncode == 0 and f'ZIPCCL_TOPO_XML={missing} cannot be read' in r.stdout
          and missing in r.stderr, 'an unreadable ZIPCCL_TOPO_XML is said, not fatal', r)


def param_names(path):
    with open(path, encoding='utf-8') as f:
        text = f.read()
    names = ['ZIPCCL_' + s for s in re.findall(r'^\s*ZC_PARAM\(\s*\w+\s*,\s*(?:AGREED|LOCAL)\s*,\s*\w+\s*,\s*"(\w+)"',
                                                   text, flags=re.M)]
    if not names:
        sys.exit(f'{path}: no ZC_PARAM entries found')
    return names


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    info, params_def = sys.argv[1], sys.argv[2]
    names = param_names(params_def)

    r = run(info)
    check(r.returncode == 0, 'zipccl-info with a clean environment exits 0', r)
    check(r.stderr == '', 'zipccl-info with a clean environment prints nothing on stderr', r)
    for name in names:
        check(re.search(rf'^{name}\s', r.stdout, flags=re.M) is not None,
              f'zipccl-info lists {name}', r)
    listed = re.findall(r'^(ZIPCCL_\w+)\s', r.stdout, flags=re.M)
    check(sorted(listed) == sorted(names),
          f'zipccl-info lists exactly the params.def variables (got {listed})', r)

    check_facts(info, os.path.join(os.path.dirname(os.path.abspath(params_def)), '..', 'tests',
                                   'fixtures', 'topo'))

    r = run(info, extra_env={'ZIPCCL_QSGD_BITS': '8'})
    check(r.returncode == 0, 'ZIPCCL_QSGD_BITS=8 is accepted', r)
    check(re.search(r'^ZIPCCL_QSGD_BITS\s.*=\s*8\s', r.stdout, flags=re.M) is not None,
          'ZIPCCL_QSGD_BITS=8 shows as the current value 8', r)

    check('tcp bootstrap: no secret: trusts the network' in r.stdout,
          'without ZIPCCL_JOB_SECRET the mode is "no secret: trusts the network"', r)
    check(re.search(r'^ZIPCCL_JOB_SECRET\s.*=\s*unset\s', r.stdout, flags=re.M) is not None,
          'ZIPCCL_JOB_SECRET shows as unset', r)
    secret = 'do-not-print-me-0123456789abcdef'
    r = run(info, extra_env={'ZIPCCL_JOB_SECRET': secret})
    check(r.returncode == 0, 'ZIPCCL_JOB_SECRET is accepted', r)
    check('tcp bootstrap: secret: proven membership' in r.stdout,
          'with ZIPCCL_JOB_SECRET the mode is "secret: proven membership"', r)
    check(re.search(r'^ZIPCCL_JOB_SECRET\s.*=\s*set\s', r.stdout, flags=re.M) is not None,
          'ZIPCCL_JOB_SECRET shows as set', r)
    check(secret not in r.stdout + r.stderr, 'the secret is never printed', r)
    r = run(info, extra_env={'ZIPCCL_JOB_SECRET': secret + '\t'})
    check(r.returncode != 0 and 'ZIPCCL_JOB_SECRET' in r.stderr,
          'a bad ZIPCCL_JOB_SECRET fails naming the variable', r)
    check(secret not in r.stdout + r.stderr, 'a bad secret is not printed either', r)

    r = run(info, extra_env={'ZIPCCL_QSGD_BITS': '99'})
    check(r.returncode != 0, 'ZIPCCL_QSGD_BITS=99 makes zipccl-info fail', r)
    check('ZIPCCL_QSGD_BITS' in r.stderr, 'the error names ZIPCCL_QSGD_BITS', r)
    check('2..17' in r.stderr, 'the error gives the range 2..17', r)
    check('99' in r.stderr, 'the error gives the bad value 99', r)

    r = run(info, extra_env={'ZIPCCL_QSGD_BIT': '4'})
    check(r.returncode == 0, 'an unknown ZIPCCL_QSGD_BIT is a warning, not a failure', r)
    check('did you mean ZIPCCL_QSGD_BITS' in r.stderr,
          'ZIPCCL_QSGD_BIT=4 warns "did you mean ZIPCCL_QSGD_BITS"', r)

    r = run(info, ['--help'])
    check(r.returncode == 0 and 'usage' in r.stdout, '--help prints usage and exits 0', r)
    r = run(info, ['--no-such-option'])
    check(r.returncode == 2 and 'usage' in r.stderr, 'a bad option prints usage to stderr, exits 2',
          r)

    r = run(info, ['--markdown'])
    check(r.returncode == 0, '--markdown exits 0', r)
    for name in names:
        check(f'`{name}`' in r.stdout, f'--markdown documents {name}', r)

    if failures:
        print(f'\n{len(failures)} check(s) failed')
        return 1
    print(f'zipccl-info: all checks passed ({len(names)} variables)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
