#!/usr/bin/env bash
# What one call of the device tool sends, before making it: the tracked files present, the
# untracked files git does not ignore, and the ignored paths the call will carry (the arguments).
# The tool refuses a call above 64 MiB, and a refused call still costs device time (90 s on
# 2026-12-07), so check first:
#   bench/device-tree-size.sh out/c2.tar.xz || move results/ and train-state/ aside (tracked,
#   not needed on the GPU machine) and check again
# Prints the bytes and exits 1 above the limit.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$((64 * 1024 * 1024))
total=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] && total=$((total + $(stat -c %s "$f")))
done < <(git ls-files -z --cached --others --exclude-standard)
for c in "$@"; do
  total=$((total + $(du -sb "$c" | cut -f1)))
done
echo "device call sends $total bytes ($((total / 1048576)) MiB) of at most $limit (64 MiB)"
[ "$total" -le "$limit" ]
