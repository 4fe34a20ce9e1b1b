"""README.md's install section, followed as a platform engineer follows it, on the real node.

The test runs the README's own marked blocks (`tests/support/readme.py`), so the README cannot drift
from what works:

1. `cli`: the CLI installed into a fresh virtualenv from a clean copy of the repository (pip, the
   registries only); the test then uses that CLI, not the suite's.
2. `image`: `make image` writes the OCI archive; the README's push (`skopeo copy ... docker://REF`)
   is the one step a sandbox cannot take, so the archive is imported into the node's image store
   under the same REF instead (what a pull from the registry leaves there).
3. `chart`: the README's `helm install` line, exactly, with no other values.
4. `applicationset` and `progressivesync`: the README's ApplicationSet (its Git source pointed at the
   stack's repository: the user's repository is theirs) and ProgressiveSync, applied with kubectl to
   the real Argo CD; the first rollout deploys the never-synced Applications, a commit then rolls out
   as a second release. Both end Succeeded, each Application synced once per release.

Real: a control plane and node of its own (the session's stack is stopped first: one node per
machine), the Argo Workflows controller, Argo CD's application and ApplicationSet controllers and
repo-server, helm, kubectl, pip, and the watcher running as the chart's pod of the built image.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.devenv import images as images_mod
from orchestrator.devenv import starter_app, tools
from orchestrator.devenv.argocd_requests import app_set_applications
from orchestrator.devenv.argocd_settings import ArgoCDSettings, ClusterSpec
from orchestrator.devenv.node import PODS, NodeTools
from orchestrator.devenv.stack import DevStack, StackOptions
from orchestrator.kube.client import APPLICATIONS, PROGRESSIVE_SYNCS, WORKFLOWS, Kube
from tests.support.readme import Block, readme_blocks
from tests.support.realstack import TEST_REQUEUE_TIME, RealStackSession
from tests.support.wait import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
BLOCKS = ("cli", "image", "chart", "applicationset", "progressivesync")


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float, stdin: str | None = None) -> str:
    result = subprocess.run(
        argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, (
        f"{' '.join(argv)} (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout + result.stderr


def _clean_copy(target: Path) -> Path:
    """The repository's files as a clone has them (tracked and new, not ignored): what a user clones."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _cluster_labels(app_set: dict[str, Any]) -> dict[str, str]:
    """The labels the README's clusters generator selects by (matchLabels; none: any cluster)."""
    for generator in app_set["spec"]["generators"]:
        clusters = generator.get("clusters")
        if clusters is not None:
            return dict((clusters.get("selector") or {}).get("matchLabels") or {})
    raise AssertionError("the README's ApplicationSet has no clusters generator")


def _pointed_at(app_set: dict[str, Any], repo_url: str) -> dict[str, Any]:
    """The README's ApplicationSet with its Git source on the stack's repository and starter app."""
    source = app_set["spec"]["template"]["spec"]["source"]
    source.update(repoURL=repo_url, path=starter_app.APP_PATH, targetRevision="main")
    return app_set


def _phase(kube: Kube, namespace: str, name: str) -> str:
    return str((kube.get(PROGRESSIVE_SYNCS, namespace, name).get("status") or {}).get("phase", ""))


def _synced_at(kube: Kube, namespace: str, names: list[str], revision: str) -> bool:
    for name in names:
        status = kube.get(APPLICATIONS, namespace, name).get("status") or {}
        sync, health = status.get("sync") or {}, status.get("health") or {}
        if (sync.get("status"), sync.get("revision"), health.get("status")) != (
            "Synced",
            revision,
            "Healthy",
        ):
            return False
    return True


@pytest.fixture
def readme() -> dict[str, Block]:
    return readme_blocks(BLOCKS)


@pytest.fixture
def user_stack(
    real_stack_session: RealStackSession, readme: dict[str, Block], tmp_path: Path
) -> Iterator[DevStack]:
    """A cluster as the README's reader has it: Kubernetes, Argo Workflows and Argo CD, with the
    README's ApplicationSet's cluster labels on three Argo CD clusters; no progressive-sync in it."""
    real_stack_session.stop()  # this test needs the machine's node for a stack of its own
    labels = _cluster_labels(yaml.safe_load(readme["applicationset"].text))
    clusters = tuple(
        ClusterSpec(name, {**labels, "region": region})
        for name, region in (("eu-1", "eu"), ("us-1", "us"), ("eu-2", "eu"))
    )
    stack = DevStack.start(
        StackOptions(
            argo_workflows=True,
            # As the session's stack: the controller looks at a Workflow again within 1 s, not 10
            # (the README's steps do not set it; each of the rollout's steps waited for it).
            requeue_time=TEST_REQUEUE_TIME,
            namespaces=(),  # the chart creates the namespace's accounts and RBAC
            workdir=tmp_path / "stack",
            # One API server per cluster: the README deploys the same objects in the same namespace to each.
            argocd=ArgoCDSettings(clusters=clusters, servers=3, reconciliation_seconds=5, app_set=None),
        )
    )
    try:
        yield stack
    finally:
        stack.stop()


@pytest.mark.stops_the_real_stack
@pytest.mark.timeout(1800)
def test_the_readme_install_section_takes_a_user_to_a_succeeded_rollout(
    user_stack: DevStack, readme: dict[str, Block], tmp_path: Path
) -> None:
    stack = user_stack
    assert stack.cluster is not None and stack.argocd is not None and stack.node is not None
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "KUBECONFIG": str(stack.cluster.kubeconfig),
        # Downloads stay warm across runs; the virtualenv itself is new.
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
        "PATH": f"{tools.binary('kubectl').parent}:{tools.binary('helm').parent}:{os.environ['PATH']}",
    }
    for variable in ("VIRTUAL_ENV", "PYTHONPATH", "KUBEBUILDER_ASSETS"):
        env.pop(variable, None)
    clone = _clean_copy(tmp_path / "progressive-sync")

    # 1. The CLI, from the clone, into a fresh virtualenv.
    for argv in readme["cli"].commands():
        if argv[0] in ("git", "cd"):
            continue  # the clone is made above
        _run(
            [a.replace("~", str(home), 1) if a.startswith("~") else a for a in argv],
            cwd=clone,
            env=env,
            timeout=900,
        )
    [cli] = [p for p in home.rglob("bin/progressive-sync") if p.is_file()]
    assert "progressive-sync" in _run([str(cli), "--version"], cwd=clone, env=env, timeout=60)

    # 2. The image: `make image` as written; the push becomes an import under the pushed name.
    image_ref = ""
    for argv in readme["image"].commands():
        if argv[0] == "make":
            _run(argv, cwd=REPO_ROOT, env={**env, "HOME": str(Path.home())}, timeout=900)
        elif argv[0] == "skopeo":
            archive = REPO_ROOT / next(a.split(":", 1)[1] for a in argv if a.startswith("oci-archive:"))
            image_ref = next(a.removeprefix("docker://") for a in argv if a.startswith("docker://"))
            _import_as(stack, archive, image_ref)
    assert image_ref, "the README's image block names no `skopeo copy ... docker://REF` push"

    # 3. The chart, with only the README's values.
    [helm_install] = [argv for argv in readme["chart"].commands() if argv[:2] == ["helm", "install"]]
    _run(helm_install, cwd=clone, env=env, timeout=300)
    kube = Kube.from_kubeconfig(str(stack.cluster.kubeconfig))
    try:
        namespace = helm_install[helm_install.index("--namespace") + 1]
        wait_for(
            lambda: _watcher_ready(kube, namespace, image_ref),
            timeout=180,
            interval=1.0,
            what=f"the chart's watcher pod running {image_ref}",
        )

        # 4. The README's ApplicationSet and ProgressiveSync.
        app_set = _pointed_at(yaml.safe_load(readme["applicationset"].text), stack.argocd.repo.url)
        _apply(yaml.safe_dump(app_set), env)
        progressive_sync = yaml.safe_load(readme["progressivesync"].text)
        ps_name = progressive_sync["metadata"]["name"]
        ps_namespace = progressive_sync["metadata"].get("namespace", namespace)
        manifest = tmp_path / "progressivesync.yaml"
        manifest.write_text(readme["progressivesync"].text)
        assert "OK" in _run([str(cli), "validate", "-f", str(manifest)], cwd=clone, env=env, timeout=60)
        _apply(readme["progressivesync"].text, env)
        argocd_ns, app_set_name = stack.argocd.namespace, app_set["metadata"]["name"]
        apps = wait_for(
            lambda: _three(sorted(app_set_applications(kube, argocd_ns, app_set_name))),
            timeout=120,
            what="the README's ApplicationSet's three Applications",
        )
        # The first rollout deploys the never-synced Applications; a commit is the next release.
        revisions = []
        for release in (stack.argocd.repo.head, stack.argocd.release):
            revision = release()
            revisions.append(revision)
            stack.argocd.refresh(apps)
            wait_for(
                lambda r=revision: (
                    _synced_at(kube, argocd_ns, apps, r)
                    and _phase(kube, ps_namespace, ps_name) in ("Succeeded", "Failed")
                ),
                timeout=300,
                interval=1.0,
                what=f"the rollout of {revision[:12]} to end with every Application at it",
                describe=lambda: _state(kube, ps_namespace, ps_name, argocd_ns, apps),
            )
            status = _run([str(cli), "status", ps_name, "-n", ps_namespace], cwd=clone, env=env, timeout=60)
            assert _phase(kube, ps_namespace, ps_name) == "Succeeded", status
        # One sync per Application per release (Argo CD's own record of what it deployed).
        for name in apps:
            history = (kube.get(APPLICATIONS, argocd_ns, name).get("status") or {}).get("history") or []
            assert [entry.get("revision") for entry in history] == revisions, (name, history)
        shown = _run([str(cli), "status", ps_name, "-n", ps_namespace], cwd=clone, env=env, timeout=60)
        assert "Succeeded" in shown, shown
    finally:
        kube.close()


def _state(kube: Kube, namespace: str, name: str, argocd_ns: str, apps: list[str]) -> dict[str, Any]:
    """What the rollout and the Applications look like, for a failure message."""
    status = kube.get(PROGRESSIVE_SYNCS, namespace, name).get("status") or {}
    found: dict[str, Any] = {
        "phase": status.get("phase"),
        "conditions": [
            (c.get("type"), c.get("reason"), c.get("message")) for c in status.get("conditions") or []
        ],
        "workflows": [w["metadata"]["name"] for w in kube.list(WORKFLOWS, namespace)[0]],
    }
    for app in apps:
        app_status = kube.get(APPLICATIONS, argocd_ns, app).get("status") or {}
        found[app] = (
            (app_status.get("sync") or {}).get("status"),
            str((app_status.get("sync") or {}).get("revision", ""))[:12],
            (app_status.get("health") or {}).get("status"),
            ((app_status.get("operationState") or {}).get("message") or "")[:200],
        )
    return found


def _apply(manifest: str, env: dict[str, str]) -> None:
    _run(["kubectl", "apply", "-f", "-"], cwd=REPO_ROOT, env=env, timeout=60, stdin=manifest)


def _three(names: list[str]) -> list[str] | None:
    return names if len(names) == 3 else None


def _import_as(stack: DevStack, archive: Path, reference: str) -> None:
    """What a pull of the pushed image leaves on the node: the archive in containerd under `reference`."""
    assert stack.node is not None
    ctr = [str(NodeTools.find().ctr), "--address", str(stack.node.containerd_socket), "--namespace", "k8s.io"]
    imported = subprocess.run(
        [*ctr, "images", "import", str(archive)], capture_output=True, text=True, timeout=300, check=True
    ).stdout
    [built] = re.findall(rf"{re.escape(images_mod.REGISTRY)}/\S+", imported) or [None]
    assert built, imported
    subprocess.run(
        [*ctr, "images", "tag", "--force", built, reference], capture_output=True, timeout=60, check=True
    )


def _watcher_ready(kube: Kube, namespace: str, image: str) -> bool:
    pods, _ = kube.list(PODS, namespace, label_selector="app.kubernetes.io/component=watcher")
    return any(
        pod["spec"]["containers"][0]["image"] == image
        and any(c.get("ready") for c in (pod.get("status") or {}).get("containerStatuses") or [])
        for pod in pods
    )
