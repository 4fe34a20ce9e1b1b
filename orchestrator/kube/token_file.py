"""A bearer token kept in a file (a pod's projected token, a kubeconfig's `tokenFile`), followed.

Kubernetes rotates a pod's token in place, and a platform team rotates a kubeconfig's `tokenFile`
the same way (a new token written, the old one revoked): the file is looked at before every
request and read again when it changed.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

log = logging.getLogger(__name__)


class TokenFile:
    """A bearer token kept in a file, read again when the file changes (a rotated credential).

    Called before every request: one stat(), and a read only when the file changed. A file that
    cannot be read, or is empty, keeps the token we have (it is being replaced; the next request
    looks again).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._header: str | None = None
        self._lock = threading.Lock()

    def __call__(self) -> str | None:
        """`Bearer <token>` as the file holds it now."""
        try:
            stat = self.path.stat()
        except OSError:
            return self._header
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if stamp == self._stamp:
            return self._header
        with self._lock:
            if stamp == self._stamp:
                return self._header
            try:
                token = self.path.read_text().strip()
            except OSError:
                return self._header
            if not token:
                return self._header
            if self._stamp is not None:
                log.info("the token in %s changed; using the new one", self.path)
            self._header = f"Bearer {token}"
            self._stamp = stamp
            return self._header
