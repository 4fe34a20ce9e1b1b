"""`python -m steps <step> [options]`: the entrypoint the Workflow's containers run (see steps.cli).

SIGTERM is answered from the first line: importing the steps takes seconds (3.6 s at load 17 on
the test node), and a pod deleted meanwhile (Argo already shows the attempt Running) died of the
signal, an exit code the Workflow's retryStrategy does not retry, so its cluster failed. Until
`steps.cli.run_step` installs the step's own handler, SIGTERM exits 75 (temporary: retried; the
steps are idempotent, and nothing was done yet).
"""

import os
import signal

EXIT_TEMPORARY = 75  # steps.cli.EXIT_TEMPORARY, not imported: that import is what this guards


def _stopped_while_starting(signum: int, frame: object) -> None:
    # os.write, not sys.stderr: the interrupted main thread may be inside a write to stderr, whose
    # buffer lock a second write from the same thread cannot take.
    try:
        os.write(2, b"steps: stopped by SIGTERM while starting: exit 75, the retry runs the step\n")
    finally:
        os._exit(EXIT_TEMPORARY)


signal.signal(signal.SIGTERM, _stopped_while_starting)

from steps.cli import main  # noqa: E402

if __name__ == "__main__":
    main(prog_name="python -m steps")
