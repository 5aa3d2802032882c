"""Shared by the reference scripts: print a result as JSON and, when asked, write it to a file."""
import json


def emit(result, out=None):
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
