"""pytest-xdist workers sharing the machine's one real stack (tests/support/realstack.py): which
test goes to which worker, what the owner publishes, the owner waiting for every guest, and the
shared/exclusive test lock.

The sharing itself runs in `make test` (the realstack tier on SHARING_WORKERS workers); these pin its
parts. Most split tables use two sides (the owner and one guest), where each step is easy to follow.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devenv import machine
from tests.support import realstack
from tests.support.realstack import OWNER_GROUP, Published, Share, guest_groups

GUEST_GROUP, THIRD_GROUP = guest_groups(3)


@dataclass(eq=False)
class Item:
    """What `assign_groups` reads of a collected test: its markers."""

    name: str
    markers: tuple[str, ...] = ("realstack",)

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.markers else None


@dataclass
class Config:
    workerinput: dict[str, Any] = field(default_factory=dict)


def groups(config: Config, items: list[Item], workers: int = 2) -> dict[str, str]:
    assigned = realstack.assign_groups(config, items, workers)  # type: ignore[arg-type]
    return {item.name: group for item, group in assigned.items()}


ITEMS = [
    Item("unit", markers=()),
    Item("a"),
    Item("b"),
    Item("second-node", ("realstack", "realstack_owner")),
    Item("c"),
    Item("d"),
    Item("kill-controller", ("realstack", "realstack_exclusive")),
    Item("sigkill", ("realstack", "stops_the_real_stack")),
]


@pytest.mark.parametrize(
    ("workerinput", "expected"),
    [
        pytest.param(
            {"workercount": 4},
            # The owner's own test (second-node, 25 s) is its load from the start, so the guest takes
            # the shareable ones until it has more (ties to the guest); the exclusive one stops both
            # sides, and the stack-stopping one (sigkill) runs after both sides' work: neither counts.
            {
                "a": GUEST_GROUP,
                "b": GUEST_GROUP,
                "second-node": OWNER_GROUP,
                "c": OWNER_GROUP,
                "d": GUEST_GROUP,
                "kill-controller": OWNER_GROUP,
                "sigkill": OWNER_GROUP,
            },
            id="the-owners-own-tests-count-so-the-guest-takes-more",
        ),
        pytest.param(
            {"workercount": 2},
            dict.fromkeys(["a", "b", "second-node", "c", "d", "kill-controller", "sigkill"], OWNER_GROUP),
            id="two-workers-all-to-the-owner",
        ),
        pytest.param(None, {}, id="no-xdist-no-groups-for-the-plain-run"),
    ],
)
def test_the_realstack_tests_are_split_between_owner_and_guest(
    workerinput: dict[str, Any] | None, expected: dict[str, str]
) -> None:
    config = Config(workerinput) if workerinput is not None else object()
    assigned = groups(config, ITEMS)  # type: ignore[arg-type]
    if workerinput is None:
        assert set(assigned.values()) == {OWNER_GROUP} and "unit" not in assigned
        return
    assert assigned == expected


def test_the_longest_tests_are_spread_first_each_to_the_less_loaded_side(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        realstack,
        "MEASURED_SECONDS",
        (("test_twelve_clusters_in_three_stages", 110.0), ("test_helm_install_a_rollout", 115.0)),
    )
    items = [
        Item("test_twelve_clusters_in_three_stages[argo]"),
        Item("test_helm_install_a_rollout"),
        Item("a"),
        Item("b"),
        Item("kill-controller", ("realstack", "realstack_exclusive")),
    ]
    # helm (115 s) first, to the guest; twelve (110 s) to the owner; a (25 s) to the owner (110 < 115);
    # b to the guest (115 < 135); the exclusive row stays with the owner, uncounted.
    assert groups(Config({"workercount": 4}), items) == {
        "test_helm_install_a_rollout": GUEST_GROUP,
        "test_twelve_clusters_in_three_stages[argo]": OWNER_GROUP,
        "a": OWNER_GROUP,
        "b": GUEST_GROUP,
        "kill-controller": OWNER_GROUP,
    }


@pytest.mark.parametrize(
    ("workercount", "expected"),
    [
        pytest.param(
            6,
            # long (100) to the first guest, twelve (90) to the second, a (25) to the owner (0),
            # b (25) to the owner again (25 < 90), c (25) to the owner (50 < 90); the exclusive row
            # stays with the owner, uncounted.
            {
                "long": GUEST_GROUP,
                "twelve": THIRD_GROUP,
                "a": OWNER_GROUP,
                "b": OWNER_GROUP,
                "c": OWNER_GROUP,
                "kill-controller": OWNER_GROUP,
            },
            id="three-sides-on-six-workers",
        ),
        pytest.param(
            3,
            # Two workers for the stack and one for the Argo CD tests' group: two sides. long
            # (100) to the guest, twelve (90) and a (25) to the owner, b to the guest (100 < 115),
            # c to the owner (115 < 125).
            {
                "long": GUEST_GROUP,
                "twelve": OWNER_GROUP,
                "a": OWNER_GROUP,
                "b": GUEST_GROUP,
                "c": OWNER_GROUP,
                "kill-controller": OWNER_GROUP,
            },
            id="as-many-sides-as-the-workers-leave-beside-argo-cds",
        ),
    ],
)
def test_three_workers_share_the_stack_when_the_run_has_workers_for_them(
    monkeypatch: pytest.MonkeyPatch, workercount: int, expected: dict[str, str]
) -> None:
    monkeypatch.setattr(realstack, "MEASURED_SECONDS", (("long", 100.0), ("twelve", 90.0)))
    items = [
        Item("long"),
        Item("twelve"),
        Item("a"),
        Item("b"),
        Item("c"),
        Item("kill-controller", ("realstack", "realstack_exclusive")),
    ]
    assert groups(Config({"workercount": workercount}), items, workers=3) == expected


def test_the_owner_waits_for_every_guest(tmp_path: Path) -> None:
    share = Share(tmp_path, guests=(GUEST_GROUP, THIRD_GROUP))
    share.say_guest_done(GUEST_GROUP)
    started = time.monotonic()
    share.wait_guest_done(timeout=1)  # gives up at its deadline, THIRD_GROUP not done
    assert time.monotonic() - started >= 1
    share.say_guest_done(THIRD_GROUP)
    started = time.monotonic()
    share.wait_guest_done(timeout=30)
    assert time.monotonic() - started < 5


def test_the_analysis_tests_go_together_to_one_side_as_one_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests of the process-wide analysis stack all run where it runs: their summed seconds are
    one unit, placed like any test (longest first, to the less loaded side)."""
    monkeypatch.setattr(
        realstack,
        "MEASURED_SECONDS",
        (("gate", 60.0), ("long", 100.0), ("node", 50.0)),
    )
    analysis = ("realstack", "realstack_analysis")
    items = [
        Item("gate-a", analysis),
        Item("long"),
        Item("gate-b", analysis),
        Item("node", ("realstack", "realstack_owner")),
        Item("short-a"),
        Item("short-b"),
    ]
    # The owner starts at 50 (its own node test). The analysis unit (120) is the longest: to the
    # guest (0 <= 50); long (100) to the owner (50 < 120); short-a (25) to the guest (120 <= 150),
    # short-b (25) too (145 <= 150).
    assert groups(Config({"workercount": 4}), items) == {
        "gate-a": GUEST_GROUP,
        "gate-b": GUEST_GROUP,
        "long": OWNER_GROUP,
        "node": OWNER_GROUP,
        "short-a": GUEST_GROUP,
        "short-b": GUEST_GROUP,
    }


def test_an_owner_heavy_split_gives_the_analysis_unit_to_the_owner_when_it_is_lighter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(realstack, "MEASURED_SECONDS", (("gate", 10.0), ("long", 100.0)))
    analysis = ("realstack", "realstack_analysis")
    items = [Item("long"), Item("gate-a", analysis), Item("gate-b", analysis)]
    # long (100) to the guest; the analysis unit (20) then to the owner (0 < 100).
    assert groups(Config({"workercount": 4}), items) == {
        "long": GUEST_GROUP,
        "gate-a": OWNER_GROUP,
        "gate-b": OWNER_GROUP,
    }


def test_the_guest_is_published_an_identity_for_the_analysis_controller() -> None:
    """The guest holds no CA: what it needs to start the analysis controller travels in `Published`."""
    facts = dataclasses.replace(published(), analysis_identity="/stack/argo-rollouts-guest.kubeconfig")
    assert Published.from_json(facts.to_json()) == facts
    without = json.loads(published().to_json())
    without.pop("analysis_identity")
    assert Published.from_json(json.dumps(without)).analysis_identity == "", "an older JSON still reads"


def published() -> Published:
    return Published(
        tools_dir="/tools",
        workdir="/tmp/cp",
        api_url="https://127.0.0.1:1",
        kubeconfig="/tmp/cp/admin.kubeconfig",
        step_image="progressive-sync.local/steps:abc",
        argo_server_url="http://127.0.0.1:2",
        argo_environment=(("ARGO_SERVER", "127.0.0.1:2"),),
        exports=(("KUBECONFIG", "/tmp/cp/admin.kubeconfig"), ("PATH", "/tools:$PATH")),
    )


def test_the_guest_reads_what_the_owner_published(tmp_path: Path) -> None:
    share = Share(tmp_path)
    share.publish(published())
    assert share.wait_published(timeout=1) == published()
    assert [p.name for p in tmp_path.iterdir()] == ["stack.json"]  # written whole, then renamed


def test_the_guest_fails_with_the_owners_error_rather_than_waiting(tmp_path: Path) -> None:
    share = Share(tmp_path)
    share.publish_error("NodeBusy: a dev node is already running")
    started = time.monotonic()
    with pytest.raises(machine.MachineError, match="could not start it: NodeBusy"):
        share.wait_published(timeout=30)
    assert time.monotonic() - started < 5


def _hold_shared(lock: Path, seconds: float) -> subprocess.Popen[bytes]:
    holder = subprocess.Popen(
        ["flock", "--shared", "--close", str(lock), "sh", "-c", f"echo held; sleep {seconds}"],
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    return holder


@pytest.mark.parametrize(
    ("exclusive", "waits"),
    [
        pytest.param(False, False, id="a-shared-test-runs-beside-the-other-workers-test"),
        pytest.param(True, True, id="an-exclusive-test-waits-until-the-other-worker-is-between-tests"),
    ],
)
def test_the_test_lock(tmp_path: Path, exclusive: bool, waits: bool) -> None:
    share = Share(tmp_path)
    other = _hold_shared(tmp_path / "test.lock", 30)
    try:
        if waits:
            with (
                pytest.raises(machine.MachineError, match="test lock"),
                share.test_turn(exclusive=exclusive, timeout=0.5),
            ):
                pass
            other.kill()
            other.wait()
        with share.test_turn(exclusive=exclusive, timeout=10):
            held = subprocess.run(["flock", "--nonblock", str(tmp_path / "test.lock"), "true"], check=False)
            assert held.returncode == 1  # this test holds it meanwhile
    finally:
        other.kill()
        other.wait()
