"""Unpacks a .deb's data archive (ar member data.tar.{xz,zst,gz}) into a folder, as `dpkg -x`
does, for machines without dpkg. python3 standard library only (.tar.zst needs the zstd tool).

    python3 tools/corpus/deb_extract.py FILE.deb ROOT"""

import io
import lzma
import os
import subprocess
import sys
import tarfile


def ar_members(data):
    if data[:8] != b"!<arch>\n":
        raise ValueError("not an ar archive")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        yield name, data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)


def extract(deb, root):
    with open(deb, "rb") as f:
        data = f.read()
    for name, blob in ar_members(data):
        if not name.startswith("data.tar"):
            continue
        if name.endswith(".xz"):
            blob = lzma.decompress(blob)
        elif name.endswith(".zst"):
            blob = subprocess.run(["zstd", "-dc"], input=blob, capture_output=True, check=True).stdout
        mode = "r:gz" if name.endswith(".gz") else "r:"
        with tarfile.open(fileobj=io.BytesIO(blob), mode=mode) as tar:
            tar.extractall(root)
        return
    raise ValueError(f"{deb}: no data.tar member")


if __name__ == "__main__":
    extract(sys.argv[1], sys.argv[2])
    os.sys.exit(0)
