"""The `progressive-sync` command line: assembles the subcommands and sets up logging.

Each subcommand lives in its own module under `orchestrator/cli/` and parses its flags into
a typed settings object; nothing here holds state. Exit codes: 0 ok, 1 a failed rollout or invalid
input, 2 bad usage (click's own code for usage errors).
"""

from __future__ import annotations

import click

from orchestrator import __version__
from orchestrator.cli import (
    demo_cmd,
    devcluster_cmd,
    executor_cmd,
    ops_cmd,
    plan_cmd,
    render_cmd,
    simulate_cmd,
    validate_cmd,
    watch_cmd,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="progressive-sync")
def main() -> None:
    """Roll a change out across a fleet of Kubernetes clusters with Argo CD, in stages."""


main.add_command(devcluster_cmd.dev_cluster)
main.add_command(plan_cmd.plan)
main.add_command(validate_cmd.validate)
main.add_command(ops_cmd.status)
main.add_command(ops_cmd.cancel)
main.add_command(ops_cmd.pause)
main.add_command(ops_cmd.resume)
main.add_command(ops_cmd.approve)
main.add_command(ops_cmd.retry)
main.add_command(simulate_cmd.simulate)
main.add_command(demo_cmd.demo)
main.add_command(watch_cmd.watch)
main.add_command(render_cmd.render)
main.add_command(executor_cmd.executor)


if __name__ == "__main__":
    main()
