#!/usr/bin/env bash
# Run every fuzz target of the module for FUZZTIME each (go test -fuzz takes
# one target of one package at a time). `make test` runs it briefly, `make
# fuzz` longer. A failure leaves the failing input under the package's
# testdata/fuzz/, where the next plain `go test` replays it.
#
# FUZZJOBS targets (default: the number of CPUs) run side by side, each
# with one fuzzing worker (-parallel 1): the same CPU time per target as
# one at a time with a worker per CPU, in a fraction of the wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${GO:=go}" "${GOTAGS:=libvirt_dlopen}" "${FUZZTIME:=60s}" "${FUZZJOBS:=$(nproc)}"
targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  dir=$(dirname "$file")
  grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed "s|^func |$dir |"
done)
if [[ -z "$targets" ]]; then
  echo "fuzz.sh: no fuzz targets found" >&2
  exit 1
fi
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# fuzz runs one target once, appending its output to $3.
fuzz() {
  "$GO" test -tags "$GOTAGS" -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 5s -parallel 1 "$1" >> "$3" 2>&1
}

# one runs target $2 of package $1, its output in $3.
one() {
  local dir=$1 target=$2 log=$3 corpus before after
  corpus="$dir/testdata/fuzz/$target"
  before=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
  echo "== $dir $target ($FUZZTIME)" > "$log"
  fuzz "$dir" "$target" "$log" && return 0
  # Go's fuzz coordinator before Go 1.27 sometimes reports the end of a
  # duration -fuzztime itself as a failure ("context deadline exceeded",
  # with no failing input): a race in internal/fuzz, golang/go#75804.
  # Seen once in CI (FuzzCut). That, and only that, is run again once; a
  # failing input is never retried away.
  after=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
  if [[ "$after" -eq "$before" ]] && grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written' "$log"; then
    echo "fuzz.sh: $target ended with \"context deadline exceeded\" and no failing input (the fuzzer's own deadline); running it once more" >> "$log"
    fuzz "$dir" "$target" "$log"
    return
  fi
  return 1
}

# finish waits for the next job to end and prints its log; a failed job
# makes the script fail once the running ones have ended.
failed=0
declare -A logof=()
finish() {
  local pid status=0
  wait -n -p pid || status=$?
  cat "${logof[$pid]}"
  if [[ $status -ne 0 ]]; then
    echo "fuzz.sh: FAILED: $(head -1 "${logof[$pid]}" | sed 's/^== //')"
    failed=1
  fi
  unset "logof[$pid]"
}

n=0
while read -r dir target; do
  while [[ ${#logof[@]} -ge $FUZZJOBS ]]; do finish; done
  one "$dir" "$target" "$logs/$n" &
  logof[$!]="$logs/$n"
  n=$((n + 1))
done <<< "$targets"
while [[ ${#logof[@]} -gt 0 ]]; do finish; done
if [[ $failed -ne 0 ]]; then
  exit 1
fi
echo "fuzz.sh: $n targets, $FUZZTIME each, $FUZZJOBS at a time"
