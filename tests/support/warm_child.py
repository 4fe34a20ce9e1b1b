"""A tiny module the warm launcher tests run as `__main__` (tests/unit/test_warm_python.py).

`python -m tests.support.warm_child WHAT [ARG]`: WHAT picks one behaviour, so each test sets only
what it checks. Importing it does nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time


def open_descriptors() -> list[int]:
    """Descriptors above stderr that are open in this process."""
    found = []
    for fd in range(3, 1024):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.append(fd)
    return found


def main(argv: list[str]) -> None:
    """Do what argv[0] says; exit through SystemExit or an exception as the test wants."""
    what = argv[0]
    arg = argv[1] if len(argv) > 1 else ""
    if what == "exit":
        print(f"exiting {arg}")
        print(f"to stderr {arg}", file=sys.stderr)
        sys.exit(int(arg))
    if what == "exit-none":
        sys.exit()
    if what == "exit-str":
        sys.exit(arg)
    if what == "raise":
        raise RuntimeError(arg)
    if what == "report":
        report = {
            "argv": sys.argv[1:],
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "fds": open_descriptors(),
            "ppid": os.getppid(),
        }
        print(json.dumps(report))
        return
    if what == "sleep":
        print("sleeping", flush=True)
        time.sleep(float(arg))
        return
    raise SystemExit(f"unknown behaviour {what!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
