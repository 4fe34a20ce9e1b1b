"""`python -m steps <step> [options]`: the entrypoint the Workflow's containers run (see steps.cli)."""

from steps.cli import main

if __name__ == "__main__":
    main(prog_name="python -m steps")
