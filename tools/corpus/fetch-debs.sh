#!/usr/bin/env bash
# Downloads the .deb files of tools/corpus/debs.txt (and debs-asr.txt with --asr) into DEST with
# `apt-get download` (no root needed, nothing installed), for a machine without Debian's packages:
#   tools/corpus/fetch-debs.sh DEST [--asr]
# then, there: tools/corpus/unpack-debs.sh DEST ROOT and tools/corpus/synth.py --root ROOT ...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: fetch-debs.sh DEST [--asr]}"
lists=("$here/debs.txt")
if [ "${2:-}" = "--asr" ]; then lists+=("$here/debs-asr.txt"); fi
mkdir -p "$dest"
cd "$dest"
# shellcheck disable=SC2046
apt-get download $(grep -hv '^#' "${lists[@]}")
ls -1 ./*.deb | wc -l | xargs echo "fetch-debs: .deb files in $dest:"
du -sh . | cut -f1 | xargs echo "fetch-debs: total"
