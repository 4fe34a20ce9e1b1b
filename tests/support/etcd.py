"""Compacting the test control plane's etcd, to make old resourceVersions answer 410 Gone.

etcd serves a JSON gateway for its v3 API on the client URL: `/v3/kv/range` tells the current
revision (the header of any answer) and `/v3/kv/compaction` drops history before a revision. The
kube-apiserver's resourceVersions are etcd revisions, so after a compaction a watch from an older
resourceVersion that reaches etcd (watch cache off) gets a 410.
"""

from __future__ import annotations

import base64
import json
import urllib.request


def _post(etcd_url: str, path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        f"{etcd_url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def current_revision(etcd_url: str) -> int:
    """The store's current revision (what the newest resourceVersion is)."""
    answer = _post(etcd_url, "/v3/kv/range", {"key": base64.b64encode(b"/").decode(), "limit": 1})
    return int(answer["header"]["revision"])  # type: ignore[index]


def compact(etcd_url: str, revision: int | None = None) -> int:
    """Compact history up to `revision` (default: the current one); returns the revision used."""
    target = revision if revision is not None else current_revision(etcd_url)
    _post(etcd_url, "/v3/kv/compaction", {"revision": str(target), "physical": True})
    return target
