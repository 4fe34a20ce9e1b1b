"""Headless Chromium driven over the DevTools protocol: open a page, wait for it, read it, take a PNG.

Why the protocol and not `chromium --headless --screenshot`: that either hangs (with
`--virtual-time-budget`, because a page with a live event stream, like the Argo UI, never idles)
or shoots before the page has drawn anything. Over the protocol a test waits for the condition it
cares about (an element, a text) with a deadline, then captures.

Why `websocket-client` and no more: the protocol is JSON messages over one WebSocket. That library
(already installed: the `kubernetes` client depends on it) does the WebSocket framing; the few
protocol commands we use (`Page.navigate`, `Runtime.evaluate`, `Page.captureScreenshot`,
`Emulation.setDeviceMetricsOverride`) are a line each here. Playwright would work with Debian's
chromium too (its `executable_path`), but it brings its own Node driver and pins the browser
versions it supports; we need none of that.

`Chromium.launch()` starts Debian's `chromium` (the tools' Debian-packages script installs it) with
a throw-away profile and `--remote-debugging-port=0`, reads the port Chromium chose from the
profile's `DevToolsActivePort`, and attaches to its first page. Every call has a timeout; `close()`
(or leaving the `with` block) kills the browser's process group and removes the profile.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
LAUNCH_TIMEOUT = 30.0
CALL_TIMEOUT = 30.0
# Navigation errors that say nothing of the page: Chromium aborts a load when the machine's network
# configuration changes under it (the real node adds and removes pod veths). Tried again, bounded.
TRANSIENT_NAVIGATION_ERRORS = frozenset({"net::ERR_NETWORK_CHANGED"})
NAVIGATE_ATTEMPTS = 4


class BrowserError(RuntimeError):
    """Chromium could not start, a protocol call failed, or a wait ran past its deadline."""


def find_chromium() -> str:
    """The Chromium binary on PATH, or an error saying how to install it."""
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    raise BrowserError(
        "no chromium on PATH; install Debian's package (as root: apt-get install --no-install-recommends "
        "chromium, or hack/tools/debian-packages.sh)"
    )


@dataclass
class DevToolsSession:
    """One WebSocket to one page target: `call(method, params)` returns the command's result."""

    socket: websocket.WebSocket
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @classmethod
    def connect(cls, url: str, timeout: float = CALL_TIMEOUT) -> DevToolsSession:
        """Connect to a target's `webSocketDebuggerUrl`.

        No Origin header: Chromium refuses WebSocket clients that send one it was not told to allow
        (`--remote-allow-origins`), and a test client has no origin.
        """
        return cls(websocket.create_connection(url, timeout=timeout, suppress_origin=True))

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = CALL_TIMEOUT) -> Any:
        """Send one command and wait (at most `timeout`) for its answer; events on the way are dropped."""
        call_id = next(self._ids)
        self.socket.send(json.dumps({"id": call_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"{method}: no answer from Chromium within {timeout:g}s")
            self.socket.settimeout(left)
            try:
                message = json.loads(self.socket.recv())
            except websocket.WebSocketTimeoutException as exc:
                raise BrowserError(f"{method}: no answer from Chromium within {timeout:g}s") from exc
            if message.get("id") != call_id:
                continue  # an event, or the answer to a call that timed out earlier
            if "error" in message:
                raise BrowserError(f"{method}: {message['error'].get('message')} ({message['error']})")
            return message.get("result", {})

    def close(self) -> None:
        """Close the WebSocket."""
        with contextlib.suppress(Exception):
            self.socket.close()


@dataclass
class Chromium:
    """A running headless Chromium with one page; create with `launch`, always `close()`."""

    process: subprocess.Popen[bytes]
    profile: Path
    page: DevToolsSession
    width: int
    height: int

    @classmethod
    def launch(cls, *, width: int = 1600, height: int = 1000, binary: str | None = None) -> Chromium:
        """Start Chromium headless on a fresh profile and attach to its page."""
        binary = binary or find_chromium()
        profile = Path(tempfile.mkdtemp(prefix="progressive-sync-chromium-"))
        argv = [
            binary,
            "--headless=new",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "--hide-scrollbars",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--mute-audio",
            "--password-store=basic",
            "--use-mock-keychain",
            # As root (tests run as root) Chromium refuses to start with its sandbox on.
            *(["--no-sandbox"] if os.geteuid() == 0 else []),
            "about:blank",
        ]
        log = (profile / "chromium.log").open("wb")
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.close()
        try:
            port = _wait_for_port(profile, process)
            page = DevToolsSession.connect(_page_socket_url(port))
        except BaseException:
            _stop(process)
            shutil.rmtree(profile, ignore_errors=True)
            raise
        browser = cls(process, profile, page, width, height)
        browser.page.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return browser

    # -- the page ----------------------------------------------------------------------------

    def navigate(self, url: str, timeout: float = CALL_TIMEOUT) -> None:
        """Go to `url` and wait until the document has loaded (not until an app has drawn). A
        navigation Chromium aborted because the machine's network changed under it (the real node
        adds a veth per pod: `net::ERR_NETWORK_CHANGED`) is tried again, `NAVIGATE_ATTEMPTS` times
        at most, with a growing pause; any other error is raised at once."""
        for attempt in range(1, NAVIGATE_ATTEMPTS + 1):
            result = self.page.call("Page.navigate", {"url": url}, timeout=timeout)
            error = result.get("errorText")
            if not error:
                break
            if error not in TRANSIENT_NAVIGATION_ERRORS or attempt == NAVIGATE_ATTEMPTS:
                raise BrowserError(f"cannot open {url}: {error} (attempt {attempt} of {NAVIGATE_ATTEMPTS})")
            time.sleep(0.5 * 2 ** (attempt - 1))
        self.wait_for("document.readyState === 'complete'", timeout=timeout, what=f"{url} to load")

    def evaluate(self, expression: str, timeout: float = CALL_TIMEOUT) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        result = self.page.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout=timeout,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = (details.get("exception") or {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript error: {text}")
        return result.get("result", {}).get("value")

    def wait_for(
        self,
        expression: str,
        *,
        timeout: float,
        what: str,
        interval: float = 0.1,
        accept: Callable[[Any], bool] = bool,
    ) -> Any:
        """Evaluate `expression` until `accept(value)` (default: truthy); return that value.

        Raises BrowserError after `timeout` seconds, with the last value seen.
        """
        deadline = time.monotonic() + timeout
        value: Any = None
        while True:
            value = self.evaluate(expression)
            if accept(value):
                return value
            if time.monotonic() >= deadline:
                raise BrowserError(f"timed out after {timeout:g}s waiting for {what} (last: {value!r})")
            time.sleep(interval)

    def screenshot(self, path: Path, *, full_page: bool = False) -> Path:
        """Save the page as a PNG: the viewport, or the whole page's scrollable size."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.evaluate(
                "({w: document.documentElement.scrollWidth, h: document.documentElement.scrollHeight})"
            )
            params.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": size["w"], "height": size["h"], "scale": 1},
            )
        data = self.page.call("Page.captureScreenshot", params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def resize(self, width: int, height: int) -> None:
        """Make the page's window `width` x `height` CSS pixels (the page lays itself out again)."""
        self.page.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        self.wait_for(
            f"window.innerWidth === {width} && window.innerHeight === {height}",
            timeout=CALL_TIMEOUT,
            what=f"the window to become {width}x{height}",
        )

    def log_tail(self, lines: int = 20) -> str:
        """The end of Chromium's own output (for a failure message)."""
        try:
            text = (self.profile / "chromium.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the page's socket, stop Chromium (its whole process group), remove the profile."""
        self.page.close()
        _stop(self.process)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _wait_for_port(profile: Path, process: subprocess.Popen[bytes]) -> int:
    """The DevTools port Chromium chose: the first line of `<profile>/DevToolsActivePort`."""
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = (profile / "chromium.log").read_text(errors="replace")[-2000:]
            raise BrowserError(f"chromium exited with {process.returncode}:\n{tail}")
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int(marker.read_text().splitlines()[0])
        time.sleep(0.05)
    raise BrowserError(f"chromium did not open its DevTools port within {LAUNCH_TIMEOUT:g}s")


def _page_socket_url(port: int) -> str:
    """The WebSocket URL of the browser's first page target (the about:blank it opened)."""
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5.0) as response:
            targets = json.load(response)
        pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
        if pages:
            return str(pages[0]["webSocketDebuggerUrl"])
        time.sleep(0.05)
    raise BrowserError(f"chromium opened no page within {LAUNCH_TIMEOUT:g}s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the browser's process group (it was started in its own session), then SIGKILL."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
    else:
        # The browser is gone; its helpers (renderer, GPU, zygote) may not be.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
