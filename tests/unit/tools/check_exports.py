#!/usr/bin/env python3
"""libzipccl.so exports exactly the global section of zipccl.map, all in its version node.

usage: check_exports.py LIBZIPCCL_SO ZIPCCL_MAP NM
"""
import re
import subprocess
import sys


def map_globals(path):
    """(version node name, set of global symbols) of a linker version script."""
    with open(path, encoding='utf-8') as f:
        text = f.read()
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'#[^\n]*', ' ', text)
    node = re.search(r'([A-Za-z_][A-Za-z0-9_.]*)\s*\{', text)
    glob = re.search(r'global\s*:(.*?)(?:local\s*:|\})', text, flags=re.S)
    if not node or not glob:
        sys.exit(f'{path}: no version node with a global: section')
    symbols = {s.strip() for s in glob.group(1).split(';') if s.strip()}
    wild = sorted(s for s in symbols if any(c in s for c in '*?['))
    if wild:
        sys.exit(f'{path}: wildcards in the global section defeat this check: {wild}')
    return node.group(1), symbols


def exported(lib, nm):
    """{symbol: version} of the defined dynamic symbols, the version node's own entry left out."""
    out = subprocess.run([nm, '-D', '--defined-only', '-P', lib], check=True,
                         capture_output=True, text=True).stdout
    symbols = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        base, _, version = name.partition('@')
        version = version.lstrip('@')
        if kind == 'A' and (version == '' or version == base):
            continue  # the version node itself (ZIPCCL_0), an absolute symbol
        symbols[base] = version
    return symbols


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    lib, map_path, nm = sys.argv[1:]
    node, wanted = map_globals(map_path)
    got = exported(lib, nm)
    extra = sorted(set(got) - wanted)
    missing = sorted(wanted - set(got))
    unversioned = sorted(s for s, v in got.items() if s in wanted and v != node)
    ok = True
    if extra:
        ok = False
        print(f'{len(extra)} symbol(s) exported but not in {map_path}:')
        for s in extra:
            print(f'  extra   {s}')
    if missing:
        ok = False
        print(f'{len(missing)} symbol(s) in {map_path} but not exported (undefined or hidden):')
        for s in missing:
            print(f'  missing {s}')
    if unversioned:
        ok = False
        print(f'symbol(s) not in version node {node}:')
        for s in unversioned:
            print(f'  {s}@{got[s] or "(none)"}')
    if not wanted:
        ok = False
        print(f'{map_path} exports nothing')
    if ok:
        print(f'{lib}: exactly the {len(wanted)} symbols of {map_path}, all @@{node}')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
