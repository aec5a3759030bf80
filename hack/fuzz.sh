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
n=0
while read -r dir target; do
  echo "== $dir $target ($FUZZTIME)"
  "$GO" test -tags "$GOTAGS" -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 5s "$dir"
  n=$((n + 1))
done <<< "$targets"
echo "fuzz.sh: $n targets, $FUZZTIME each"
