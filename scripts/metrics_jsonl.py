"""Reading a run's metrics.jsonl (one JSON object a line, each with a 'kind'): shared by the scripts that compare runs."""
import json
import sys


def records(path, tool):
    """Yields each line's object; a line that is not JSON ends the program naming tool, file and line."""
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{tool}: {path}:{n}: not a JSON line ({e})")
