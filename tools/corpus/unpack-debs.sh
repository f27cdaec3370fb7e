#!/usr/bin/env bash
# Unpacks every .deb file of DEBS into ROOT with `dpkg -x` (no maintainer scripts run, nothing is
# installed); tools/corpus/synth.py --root ROOT then runs festival and espeak-ng from there.
# Where dpkg is missing, each .deb (an ar archive) is unpacked with ar/tar or python3.
#   tools/corpus/unpack-debs.sh DEBS ROOT
set -euo pipefail
debs="${1:?usage: unpack-debs.sh DEBS ROOT}"
root="${2:?usage: unpack-debs.sh DEBS ROOT}"
mkdir -p "$root"
here="$(cd "$(dirname "$0")" && pwd)"
for deb in "$debs"/*.deb; do
  if command -v dpkg > /dev/null; then
    dpkg -x "$deb" "$root"
  else
    python3 "$here/deb_extract.py" "$deb" "$root"
  fi
done
# festival's voices find their lexicons through /usr/share/festival; nothing else to set up.
echo "unpack-debs: $(ls "$debs"/*.deb | wc -l) packages unpacked into $root"
