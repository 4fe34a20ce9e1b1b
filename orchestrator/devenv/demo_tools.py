"""What the demo needs built, and building the missing part before the demo starts.

`make demo` builds only the control plane and the peers' CRDs (`hack/tools/build.sh core crds`), so a
newcomer's first demo costs the core build plus about a minute. The demo's options that start more
(the argo engine and `--ui`: a real node and Argo Workflows; `--argocd real`: Argo CD; `--analysis`
and `--bad-metrics`: Argo Rollouts and Prometheus) ask `hack/tools/build.sh` for their groups here,
before anything starts, and say on stderr what they build and roughly how long it takes cold.

`demo_tool_groups` is the pure mapping from the demo's settings to build groups; `build_plan` the
pure decision of what to run and what to say, given which of those groups the build script reports
missing (`build.sh --missing`); `ensure_tools` runs the script. `make test`, `make tools` and `make
bench` still build every group.

Callers: `orchestrator.cli.demo_cmd`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.devenv.demo import ArgoCDMode, DemoSettings
from orchestrator.devenv.tools import ToolsMissing
from orchestrator.watcher.settings import Engine

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "tools" / "build.sh"

# build.sh's groups in its own build order (ALL_GROUPS there), with what each holds and roughly what
# it costs cold on 2 cores (build.sh's header and the Makefile's measured figures).
GROUP_COSTS: dict[str, tuple[str, str]] = {
    "packages": (
        "the Debian packages the stack runs (containerd, redis-server, prometheus, ...)",
        "~1-2 min",
    ),
    "core": ("etcd, kube-apiserver, kubectl, helm", "~5-8 min"),
    "crds": ("the Argo Workflows, Argo CD and Argo Rollouts CRDs", "~1 min"),
    "node": ("kubelet, kube-scheduler, kube-controller-manager (a real node)", "~3-5 min"),
    "argo": ("Argo Workflows and the Argo UI", "~5-8 min"),
    "argocd": ("Argo CD", "~25-40 min"),
    "rollouts": ("the Argo Rollouts analysis controller", "~6-10 min"),
}
# What every demo runs: the control plane and the CRDs it installs (`make demo` builds these).
CORE_GROUPS = ("core", "crds")


def demo_tool_groups(settings: DemoSettings) -> tuple[str, ...]:
    """The build groups the demo with these settings runs, in build.sh's order."""
    wanted = set(CORE_GROUPS)
    if settings.engine == Engine.ARGO:
        # A real node (containerd, runc, mmdebstrap from Debian) and the Argo Workflows controller,
        # whose `argo server` is also the Argo UI of `--ui`.
        wanted |= {"packages", "node", "argo"}
    if settings.argocd == ArgoCDMode.REAL:
        # Argo CD, and Debian's redis-server and git that it runs.
        wanted |= {"packages", "argocd"}
    if settings.with_analysis:
        # The Argo Rollouts analysis controller, and Debian's prometheus.
        wanted |= {"packages", "rollouts"}
    return tuple(group for group in GROUP_COSTS if group in wanted)


@dataclass(frozen=True)
class BuildPlan:
    """What to run before the demo (`command`, None: nothing to build) and what to say about it."""

    command: tuple[str, ...] | None
    message: str


def build_plan(script: Path, needed: Sequence[str], missing: Sequence[str]) -> BuildPlan:
    """Build exactly the needed groups the script reports missing, and say what and how long."""
    to_build = [group for group in needed if group in missing]
    if not to_build:
        return BuildPlan(command=None, message="")
    lines = [
        f"The demo needs tools that are not built yet; building them first ({script} {' '.join(to_build)}):"
    ]
    for group in to_build:
        what, cost = GROUP_COSTS[group]
        lines.append(f"  {group}: {what}, {cost} cold on 2 cores")
    lines.append("(built once into the tool cache; later demos start at once)")
    return BuildPlan(command=(str(script), *to_build), message="\n".join(lines) + "\n")


def ensure_tools(groups: Sequence[str], say: Callable[[str], None], script: Path = BUILD_SCRIPT) -> None:
    """Build the groups the tool cache lacks before the demo starts; `say` gets what is built.

    Without the build script (an installed wheel, no checkout) nothing is built: the demo's own
    lookups then name what is missing and how to build it (`tools.ToolsMissing`)."""
    if not script.is_file():
        return
    asked = subprocess.run([str(script), "--missing", *groups], capture_output=True, text=True, check=False)
    if asked.returncode != 0:
        raise ToolsMissing(f"{script} --missing {' '.join(groups)} failed: {asked.stderr.strip()}")
    plan = build_plan(script, groups, asked.stdout.split())
    if plan.command is None:
        return
    say(plan.message)
    # The build's own progress ("[tools] built argocd in 1561s") goes to stderr as it happens; its
    # stdout is the tools folder, which is also the cache's `current` the demo's lookups read.
    built = subprocess.run(list(plan.command), stdout=subprocess.DEVNULL, check=False)
    if built.returncode != 0:
        raise ToolsMissing(
            f"building {' '.join(plan.command[1:])} failed (exit {built.returncode}; its log is above)"
        )
