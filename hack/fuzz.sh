#!/usr/bin/env bash
# Run every fuzz target of the module for FUZZTIME each (go test -fuzz takes
# one target of one package at a time). `make test` runs it briefly, `make
# fuzz` longer. A failure leaves the failing input under the package's
# testdata/fuzz/, where the next plain `go test` replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${GO:=go}" "${GOTAGS:=libvirt_dlopen}" "${FUZZTIME:=60s}"
targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  dir=$(dirname "$file")
  grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed "s|^func |$dir |"
done)
if [[ -z "$targets" ]]; then
  echo "fuzz.sh: no fuzz targets found" >&2
  exit 1
fi
# fuzz runs one target once; its output goes to stdout and to $out.
fuzz() {
  "$GO" test -tags "$GOTAGS" -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 5s "$1" 2>&1 | tee "$out"
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
n=0
while read -r dir target; do
  echo "== $dir $target ($FUZZTIME)"
  corpus="$dir/testdata/fuzz/$target"
  before=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
  if ! fuzz "$dir" "$target"; then
    # Go's fuzz coordinator before Go 1.27 sometimes reports the end of a
    # duration -fuzztime itself as a failure ("context deadline exceeded",
    # with no failing input): a race in internal/fuzz, golang/go#75804.
    # Seen once in CI (FuzzCut). That, and only that, is run again once; a
    # failing input is never retried away.
    after=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
    if [[ "$after" -eq "$before" ]] && grep -q '^    context deadline exceeded$' "$out" && ! grep -q 'Failing input written' "$out"; then
      echo "fuzz.sh: $target ended with \"context deadline exceeded\" and no failing input (the fuzzer's own deadline); running it once more"
      fuzz "$dir" "$target"
    else
      exit 1
    fi
  fi
  n=$((n + 1))
done <<< "$targets"
echo "fuzz.sh: $n targets, $FUZZTIME each"
