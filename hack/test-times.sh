#!/usr/bin/env bash
# test-times.sh prints, from the log of `make test`, the time of each Go
# package (its "ok" line) and the slowest top-level tests of the packages
# under test/ (their "--- PASS" lines, which -v prints), slowest first, so
# that CI's log says where the suite's time goes.
#
# usage: hack/test-times.sh LOG [N]   (N: how many tests, default 25)
# (sed, not head, ends the lists: head would close the pipe early, and
# pipefail would then stop the script before its second list.)
set -euo pipefail
log=$1 n=${2:-25}
echo "== time per package (go test), slowest first"
awk '$1 == "ok" && $3 ~ /s$/ { t = $3; sub(/s$/, "", t); printf "%8.1fs  %s\n", t, $2 }' "${log}" | sort -rn | sed -n "1,40p"
echo "== slowest top-level tests under test/"
awk '/^--- (PASS|FAIL): Test/ { t = $4; gsub(/[()s]/, "", t); printf "%8.1fs  %s %s\n", t, $3, $2 }' "${log}" | sort -rn | sed -n "1,${n}p"
