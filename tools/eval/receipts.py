"""Writing a receipt of tools/eval: printed, and written whole or not at all."""

import json
import os


def emit(result, path=None):
    """Prints result as indented JSON and, with a path, writes it there through a temporary
    file renamed into place (a reader never sees half a receipt)."""
    text = json.dumps(result, indent=1)
    print(text)
    if path:
        with open(path + ".partial", "w") as f:
            f.write(text + "\n")
        os.replace(path + ".partial", path)
