#!/usr/bin/env bash
# Regenerates docs/env-vars.md and the configuration table in README.md from
# `zipccl-info --markdown`. With --check, changes nothing and fails if either is stale.
set -euo pipefail
info=${1:?usage: update-docs.sh PATH/TO/zipccl-info [--check]}
mode=${2:-write}
root=$(cd "$(dirname "$0")/.." && pwd)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$info" --markdown > "$tmp/env-vars.md"

# README: the table (without the page title) between the env-vars markers.
python3 - "$root/README.md" "$tmp/env-vars.md" "$tmp/README.md" <<'PY'
import re, sys
readme, table, out = sys.argv[1:4]
text = open(readme).read()
body = open(table).read().split("\n", 2)[2]  # drop "# title" and the blank line after it
begin = re.search(r"<!-- env-vars:begin[^>]*-->\n", text)
end = text.find("<!-- env-vars:end -->")
if not begin or end < begin.end():
    sys.exit("update-docs: README.md lacks the env-vars:begin/end markers")
open(out, "w").write(text[:begin.end()] + body + text[end:])
PY

if [ "$mode" = "--check" ]; then
  stale=0
  for f in docs/env-vars.md README.md; do
    if ! diff -u "$root/$f" "$tmp/$(basename "$f")"; then
      echo "update-docs: $f is stale: run 'make docs' and commit it" >&2
      stale=1
    fi
  done
  exit $stale
fi
cp "$tmp/env-vars.md" "$root/docs/env-vars.md"
cp "$tmp/README.md" "$root/README.md"
