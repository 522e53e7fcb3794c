#!/usr/bin/env bash
# Runs meson's test suites and ends with "N passed, N failed[, N skipped]",
# counted from meson's own results (meson-logs/testlog.json). Exits non-zero
# when any test failed or the runner itself failed.
set -uo pipefail
build=${1:?usage: run-tests.sh BUILD_DIR [meson test args]}
shift

log="$build/meson-logs/testlog.json"
rm -f "$log"
meson test -C "$build" --no-rebuild --print-errorlogs "$@"
rc=$?

if [ ! -s "$log" ]; then
  echo "run-tests: meson wrote no results ($log)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
python3 - "$log" "$rc" <<'PY'
import json, re, sys
passed = failed = skipped = 0
# What failed and why, right above the count: a CI log that keeps only its tail still says it.
telling = re.compile(r"\[FAIL\]|\[----\]|[Aa]ssert|Sanitizer|SUMMARY|error|ERROR|FAILED|Timeout|timed out")
digest = []
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    test = json.loads(line)
    result = test.get("result", "")
    if result in ("OK", "EXPECTEDFAIL"):
        passed += 1
    elif result == "SKIP":
        skipped += 1
    else:
        failed += 1
        out = ((test.get("stdout") or "") + (test.get("stderr") or "")).splitlines()
        why = [l for l in out if telling.search(l)] or out
        digest.append(f"--- {test.get('name')}: {result} after {test.get('duration', 0):.1f} s")
        digest += ["    " + l[:300] for l in why[-12:]]
if digest:
    print("\n".join(digest))
rc = int(sys.argv[2])
if rc != 0 and failed == 0:
    failed = 1  # the runner failed without a failing test: count it
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if failed else 0)
PY
