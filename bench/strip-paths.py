#!/usr/bin/env python3
"""Rewrites receipts in place so that they name no absolute path: a path into the source tree
(GoogleTest's "file" fields hold the build machine's absolute __FILE__) becomes relative to the
build folder ("../tests/..."), as the earlier receipts read. Usage: strip-paths.py JSON..."""
import re
import sys

TREE = re.compile(r'"(?:\\?/[^"/\\]+)+?\\?/(tests|src|configs|bench|fuzz)\\?/')

for path in sys.argv[1:]:
    text = open(path).read()
    out = TREE.sub(lambda m: '"..\\/' + m.group(1) + '\\/', text)
    if out != text:
        with open(path, "w") as f:
            f.write(out)
    left = re.findall(r'"(?:\\?/(?:work|tmp|home|root)\b)[^"]*"', out)
    if left:
        sys.exit(f"strip-paths: {path} still names {left[:3]}")
