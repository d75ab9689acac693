"""A headless Chromium driven through the DevTools protocol, for the web folder's test and bench:
serve a folder over HTTP, open its page, hold keys, read the page's own report, take a
screenshot. The protocol runs over a pipe (--remote-debugging-pipe: JSON messages ending in a
NUL byte on file descriptors 3 and 4), so nothing but the standard library is needed here.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from dreamcade.dataset.errors import UserError

# DevTools' key events: the browser's key and code names and Windows' virtual key codes
KEYS = {"left": ("ArrowLeft", 37), "right": ("ArrowRight", 39), "up": ("ArrowUp", 38), "down": ("ArrowDown", 40),
        "space": (" ", 32)}


class BrowserError(UserError):
    """Chromium is not here, or the page failed."""


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if found := shutil.which(name):
            return found
    return None


class Server:
    """A folder served over HTTP on a free local port, in a thread (python -m http.server's handler)."""

    def __init__(self, folder: str | Path) -> None:
        handler = functools.partial(Quiet, directory=str(folder))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class Browser:
    """One headless Chromium with one page. Use as a context manager."""

    def __init__(self, width: int = 800, height: int = 700) -> None:
        exe = chromium_path()
        if exe is None:
            raise BrowserError("chromium: not found; install it (Debian: `apt-get install chromium`)")
        self.profile = tempfile.mkdtemp(prefix="dreamcade-chromium-")
        r_in, w_in = os.pipe()  # we write, the browser reads on its fd 3
        r_out, w_out = os.pipe()  # the browser writes on its fd 4, we read

        def descriptors() -> None:  # in the child: its 3 and 4 are the pipes' ends
            a, b = os.dup(r_in), os.dup(w_out)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [exe, "--headless=new", "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--mute-audio", f"--window-size={width},{height}",
                "about:blank"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to sandbox itself as root
        # close_fds=False: the fds are closed after preexec_fn runs, which would close the child's
        # 3 and 4 again; Python's own descriptors are not inheritable anyway (PEP 446)
        self.proc = subprocess.Popen(args, close_fds=False, preexec_fn=descriptors, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(r_in)
        os.close(w_out)
        self.w, self.r = w_in, r_out
        self.buffer = b""
        self.next_id = 0
        self.session: str | None = None
        try:
            target = self.call("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            self.call("Page.enable")
            self.call("Runtime.enable")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.proc.terminate()
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.w, self.r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    # -- the protocol --------------------------------------------------------------------------------

    def call(self, method: str, timeout: float = 60.0, **params) -> dict:
        """Send one command (to the page once attached) and wait for its answer."""
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        end = time.monotonic() + timeout
        while True:
            for reply in self._messages(end, method):
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise BrowserError(f"chromium: {method}: {reply['error'].get('message')}")
                    return reply.get("result", {})

    def _messages(self, end: float, method: str):
        import select

        while b"\0" not in self.buffer:
            left = end - time.monotonic()
            if left <= 0:
                raise BrowserError(f"chromium: no answer to {method}")
            ready, _, _ = select.select([self.r], [], [], left)
            if ready:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise BrowserError(f"chromium: exited (code {self.proc.poll()}) during {method}")
                self.buffer += chunk
        while b"\0" in self.buffer:
            raw, self.buffer = self.buffer.split(b"\0", 1)
            yield json.loads(raw)

    # -- the page ------------------------------------------------------------------------------------

    def open(self, url: str, timeout: float = 30.0) -> None:
        """Navigate to `url` and return once the new document is the page's (the old one's
        report is never read as the new one's)."""
        self.evaluate("window.__left = true")
        self.call("Page.navigate", url=url)
        end = time.monotonic() + timeout
        while self.evaluate("window.__left === true"):
            if time.monotonic() > end:
                raise BrowserError(f"chromium: {url} did not load in {timeout:.0f} s")
            time.sleep(0.02)

    def evaluate(self, expression: str, tries: int = 50):
        """A JavaScript expression's value (JSON-able), awaited when it is a promise. Asked again
        when the page was loading itself again meanwhile (its service worker's reload)."""
        try:
            r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        except BrowserError as e:
            if tries <= 1 or "context" not in str(e).lower():
                raise
            time.sleep(0.1)
            return self.evaluate(expression, tries - 1)
        if "exceptionDetails" in r:
            raise BrowserError(f"the page: {r['exceptionDetails'].get('text')} in {expression!r}")
        return r["result"].get("value")

    def report(self) -> dict:
        """The page's report (window.dreamcade), without its functions."""
        return self.evaluate("JSON.parse(JSON.stringify(window.dreamcade || {}))") or {}

    def wait(self, condition: str, timeout: float = 60.0, poll: float = 0.05) -> dict:
        """Poll the page until the expression on its report `r` is true; the report. BrowserError
        when the page reports an error or the time runs out."""
        end = time.monotonic() + timeout
        while True:
            r = self.report()
            if r.get("error"):
                raise BrowserError(f"the page: {r['error']}")
            if self.evaluate(f"(r => Boolean({condition}))(window.dreamcade || {{}})"):
                return r
            if time.monotonic() > end:
                raise BrowserError(f"the page: {condition} not true after {timeout:.0f} s (report: {r})")
            time.sleep(poll)

    def key(self, name: str, down: bool) -> None:
        """Press or release one of KEYS."""
        key, code = KEYS[name]
        self.call("Input.dispatchKeyEvent", type="keyDown" if down else "keyUp", key=key,
                  code="Space" if key == " " else key, windowsVirtualKeyCode=code, nativeVirtualKeyCode=code)

    def screenshot(self) -> bytes:
        """A PNG of the page as it is shown."""
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
