"""Drive JupyterLab in a real Chromium, as a person would: start a throwaway server, open a notebook,
Kernel → Restart Kernel and Run All Cells, and read back what the page shows.

Shared by the real-browser test (``tests/browser/test_jupyterlab.py``) and the notebook timing
benchmark (``bench/notebook_times.py``). It does not import ragkit: it drives any notebook.

Written by hand because nothing in the ecosystem does this part: Playwright drives the browser, but
knowing when JupyterLab has finished a run (every code cell numbered, the kernel idle on the
server), starting a server that touches nothing of the user's Jupyter setup, and stopping it by its
own process id is ours. Every wait is bounded: a hang raises ``TimeoutError`` with what it waited
for, never blocks CI until its time limit.

    from jupyterlab_driver import JupyterLab, chromium, LabPage

    with JupyterLab(root=".", workdir=tmp, env={"RAGKIT_QUICK": "1"}) as lab, chromium() as browser:
        page = LabPage.open(browser, lab, "notebooks/01_quickstart.ipynb")
        seconds = page.restart_and_run_all(timeout=600)
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

CHROMIUM = os.environ.get("RAGKIT_CHROMIUM", "/usr/bin/chromium")
VIEWPORT = {"width": 1280, "height": 800}

# User settings for the throwaway server: never write the user's notebooks back (the notebooks are
# committed without outputs), attach every cell to the DOM (JupyterLab 4's default windowing skips
# the layout of off-screen cells, which would hide what we measure), and no news request to the web.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}


# Console errors that are not the notebook's doing. Each entry says why it is harmless.
HARMLESS_CONSOLE = [
    # Chromium asks for /favicon.ico on its own; JupyterLab serves its icons elsewhere.
    re.compile(r"favicon\.ico"),
    # JupyterLab's debugger extension asks a freshly opened notebook's kernel for its debug state;
    # Restart Kernel and Run All right after opening cancels that request. JupyterLab's own race on
    # restart, logged whatever the notebook holds.
    re.compile(r"Could not restore the debugger state: Canceled future for debug_request message"),
]


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned), or raise after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """A JupyterLab server on 127.0.0.1 with a random token and its own config, data, runtime,
    settings and workspace directories under ``workdir``. Stopped by its own process id."""

    def __init__(self, root: str | Path, workdir: str | Path, env: dict[str, str] | None = None,
                 unset_env: tuple[str, ...] = (), startup_timeout: float = 120):
        self.root = Path(root).resolve()
        self.workdir = Path(workdir)
        self.extra_env = env or {}
        self.unset_env = unset_env
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.token = secrets.token_hex(24)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.workdir / "jupyterlab.log"
        self.proc: subprocess.Popen | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> "JupyterLab":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        dirs = {name: self.workdir / name for name in ("config", "data", "runtime", "settings", "workspaces", "ipython")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        for rel, value in LAB_SETTINGS.items():
            path = dirs["settings"] / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        env = {k: v for k, v in os.environ.items() if k not in self.unset_env}
        env.update({
            "JUPYTER_CONFIG_DIR": str(dirs["config"]),
            "JUPYTER_DATA_DIR": str(dirs["data"]),
            "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
            "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
            "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
            "IPYTHONDIR": str(dirs["ipython"]),
            # kernels start as "python -m ipykernel_launcher": make that this interpreter
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        })
        env.update(self.extra_env)
        cmd = [
            sys.executable, "-m", "jupyterlab", "--no-browser",
            "--ip=127.0.0.1", f"--port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            f"--LabApp.user_settings_dir={dirs['settings']}",
            f"--LabApp.workspaces_dir={dirs['workspaces']}",
            "--ServerApp.terminals_enabled=False",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
            cmd.append("--allow-root")
        self._log = open(self.log_path, "ab")
        # own session: the server and anything it leaves behind are one process group we can end by id
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

        def up():
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode} before answering:\n{self.log_tail()}")
            try:
                return self.api("/api/status", timeout=5) is not None
            except (OSError, urllib.error.URLError):
                return False

        try:
            wait_until(up, self.startup_timeout, f"JupyterLab to answer /api/status on port {self.port}")
            # the settings above are what keeps the user's notebooks untouched: check they took effect
            doc = self.api("/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
            if doc["settings"].get("autosave") is not False:
                raise RuntimeError(f"autosave still on in the throwaway JupyterLab settings: {doc['settings']}")
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 20) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                for kernel in self.kernels():
                    self.shutdown_kernel(kernel["id"])
        except Exception:  # noqa: BLE001 - a server that no longer answers is stopped below all the same
            pass
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: jupyter_server shuts its kernels down and exits
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)  # our own group (start_new_session above)
                except ProcessLookupError:
                    pass
                self.proc.wait(10)
        self._log.close()
        self.proc = None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # -- REST ------------------------------------------------------------------------------------
    def api(self, path: str, method: str = "GET", timeout: float = 10) -> Any:
        req = urllib.request.Request(f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def kernels(self) -> list[dict]:
        return self.api("/api/kernels")

    def sessions(self) -> list[dict]:
        return self.api("/api/sessions")

    def kernel_for(self, path: str) -> dict | None:
        """The kernel of the notebook at ``path`` (relative to the server root), or None."""
        for s in self.sessions():
            if s.get("path") == path and s.get("kernel"):
                return self.api(f"/api/kernels/{s['kernel']['id']}")
        return None

    def shutdown_kernel(self, kernel_id: str) -> None:
        try:
            self.api(f"/api/kernels/{kernel_id}", method="DELETE", timeout=30)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:  # already gone is fine
                raise

    def lab_url(self, path: str, workspace: str) -> str:
        # a workspace per notebook: JupyterLab does not reopen the previous notebook's tabs
        return f"{self.url}/lab/workspaces/{workspace}/tree/{path}?token={self.token}"


@contextmanager
def chromium(executable: str = CHROMIUM) -> Iterator[Any]:
    """Debian's Chromium through Playwright (Playwright's own browser download is not reachable)."""
    if not Path(executable).exists():
        raise FileNotFoundError(
            f"{executable} not found: the real-browser checks need Debian's chromium "
            "(`make test` installs it: apt-get install chromium; or set RAGKIT_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, timeout=60_000)
        try:
            yield browser
        finally:
            browser.close()


# Everything below reads the one notebook open in the page.
_JS_PROMPTS = """() => [...document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')].map(c =>
    c.classList.contains('jp-CodeCell') ? (c.querySelector('.jp-InputPrompt')?.innerText ?? '').trim() : null)"""

# The PNG bytes (base64) an <img> shows: from a data: URL (a cell's image/png output) or a blob: URL
# (an ipywidgets Image); None for other images.
JS_PNG_OF = """async (img) => {
    const src = img.getAttribute('src') || '';
    if (src.startsWith('data:image/png')) return src.slice(src.indexOf(',') + 1);
    if (!src.startsWith('blob:')) return null;
    try {
        const bytes = new Uint8Array(await (await fetch(src)).arrayBuffer());
        if (bytes[0] !== 0x89 || bytes[1] !== 0x50 || bytes[2] !== 0x4e || bytes[3] !== 0x47) return null;
        let s = '';
        for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
        return btoa(s);
    } catch (e) { return 'unreadable: ' + e; }
}"""

_JS_CELLS = """async () => { const pngOf = %s;
  const pngs = async (imgs) => (await Promise.all([...imgs].map(pngOf))).filter(Boolean);
  return Promise.all([...document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')].map(async (c, i) => ({
    index: i,
    code: c.classList.contains('jp-CodeCell'),
    prompt: (c.querySelector('.jp-InputPrompt')?.innerText ?? '').trim(),
    output_text: c.querySelector('.jp-OutputArea')?.innerText ?? '',
    images: await pngs(c.querySelectorAll('.jp-OutputArea img')),
    // Mermaid diagrams JupyterLab drew itself (an SVG in an <img>): nodes drawn, text, size on screen
    diagrams: [...c.querySelectorAll('.jp-OutputArea .jp-RenderedMermaid img')].map(img => {
        const svg = decodeURIComponent((img.getAttribute('src') || '').split(',').slice(1).join(','));
        const box = img.getBoundingClientRect();
        return { nodes: (svg.match(/class="node /g) || []).length, text: svg.replace(/<style[\s\S]*?<\/style>/g, ' ').replace(/<!DOCTYPE[\s\S]*?]>/, ' ').replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').slice(0, 8000),
                 width: box.width, height: box.height, error: /Syntax error/.test(svg) }; }),
    errors: [...c.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
        .map(o => o.innerText).filter(t => /Traceback|Error/.test(t)),
  })));
}""" % JS_PNG_OF


class LabPage:
    """One notebook open in its own Playwright page at a laptop viewport, with every console error
    and page error it produced collected in ``console_errors``."""

    def __init__(self, page, lab: JupyterLab, path: str):
        self.page, self.lab, self.path = page, lab, path
        self.console_errors: list[str] = []
        page.on("console", lambda msg: msg.type == "error" and self.console_errors.append(f"console: {msg.text} @ {msg.location.get('url', '')}"))
        page.on("pageerror", lambda exc: self.console_errors.append(f"pageerror: {exc}"))

    @classmethod
    def open(cls, browser, lab: JupyterLab, path: str, viewport: dict | None = None, timeout: float = 120) -> "LabPage":
        context = browser.new_context(viewport=viewport or VIEWPORT)
        page = context.new_page()
        page.set_default_timeout(30_000)  # every locator action is bounded
        self = cls(page, lab, path)
        workspace = re.sub(r"[^A-Za-z0-9_-]", "-", Path(path).stem) + "-" + secrets.token_hex(3)
        page.goto(lab.lab_url(path, workspace), timeout=timeout * 1000)
        page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for(timeout=timeout * 1000)
        wait_until(lambda: self.kernel_state() == "idle", timeout, f"the kernel of {path} to start")
        return self

    def close(self) -> None:
        kernel = self.lab.kernel_for(self.path)
        if kernel:
            self.lab.shutdown_kernel(kernel["id"])
        self.page.context.close()

    # -- state -----------------------------------------------------------------------------------
    def kernel_state(self) -> str | None:
        kernel = self.lab.kernel_for(self.path)
        return kernel.get("execution_state") if kernel else None

    def prompts(self) -> list[str | None]:
        """Each cell's input prompt ("[3]:", "[*]:", "[ ]:"); None for markdown cells."""
        return self.page.evaluate(_JS_PROMPTS)

    def cells(self) -> list[dict]:
        """Per cell: prompt, output text, its images' PNG bytes (base64), error outputs."""
        return self.page.evaluate(_JS_CELLS)

    # -- running ---------------------------------------------------------------------------------
    def menu(self, top: str, item: str) -> None:
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(rf"^{re.escape(top)}$")).click()
        self.page.locator(".lm-Menu-item:not(.lm-mod-disabled) .lm-Menu-itemLabel",
                          has_text=re.compile(rf"^{re.escape(item)}")).first.click()

    def restart_and_run_all(self, timeout: float) -> float:
        """Kernel → Restart Kernel and Run All Cells…, confirm; wait (at most ``timeout`` s) until
        every code cell has an execution count and the kernel is idle. Returns the wall time in s
        from confirming the restart to the end of the last cell."""
        self.menu("Kernel", "Restart Kernel and Run All Cells")
        accept = self.page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept")
        accept.wait_for()
        t0 = time.monotonic()
        accept.click()
        self.wait_run_all(t0, timeout)
        return time.monotonic() - t0

    def wait_run_all(self, t0: float, timeout: float) -> None:
        deadline = t0 + timeout
        numbered = re.compile(r"^\[\d+\]:$")
        # the run has started once some code cell is queued or numbered
        wait_until(lambda: any(p and ("*" in p or numbered.match(p)) for p in self.prompts()),
                   max(1.0, deadline - time.monotonic()), f"{self.path}: the run to start")
        stalled_since = None
        while True:
            prompts = [p for p in self.prompts() if p is not None]
            state = self.kernel_state()
            if all(numbered.match(p) for p in prompts) and state == "idle":
                return
            if state == "idle" and not any("*" in p for p in prompts):
                # idle, nothing queued, cells left unnumbered: a cell raised and the run stopped
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > 5:
                    failed = [c for c in self.cells() if c["errors"]]
                    detail = "\n".join(f"cell {c['index']}: {c['errors'][-1][-1500:]}" for c in failed) or "(no error output)"
                    raise RuntimeError(f"{self.path}: run all stopped with cells unexecuted {prompts}:\n{detail}")
            else:
                stalled_since = None
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.path}: not finished after {timeout:.0f} s (prompts {prompts}, kernel {state})")
            time.sleep(0.5)

    def wait_kernel_idle(self, timeout: float, what: str) -> None:
        wait_until(lambda: self.kernel_state() == "idle", timeout, what)

    # -- pictures --------------------------------------------------------------------------------
    def screenshot(self, path: Path, locator=None) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        if locator is not None:
            locator.scroll_into_view_if_needed()
        self.page.screenshot(path=str(path))
        return path

    def scroll_notebook(self, to: str) -> None:
        """Scroll the notebook to its first cell ("top") or its last cell ("bottom")."""
        self.page.evaluate("""(to) => { const cells = document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell');
            if (cells.length) (to === 'top' ? cells[0] : cells[cells.length - 1]).scrollIntoView({block: to === 'top' ? 'start' : 'end'}); }""", to)
        self.page.wait_for_timeout(300)


def png_problem(png_b64: str) -> str | None:
    """Why a PNG (base64, as ``JS_PNG_OF`` reads it) would look blank to a person (None if it would
    not): it cannot be read or decoded, is fully transparent, or is a single colour."""
    try:
        raw = base64.b64decode(png_b64, validate=True)
        image = _decode_rgba(raw)
    except Exception as exc:  # noqa: BLE001 - anything that does not decode is the finding
        return f"does not decode: {exc}"
    width, height = image["size"]
    if width == 0 or height == 0:
        return "has no pixels"
    if image["max_alpha"] == 0:
        return f"{width}x{height} fully transparent"
    if image["colours"] == 1:
        return f"{width}x{height} a single colour {image['first']}"
    return None


def _decode_rgba(raw: bytes) -> dict:
    try:
        from PIL import Image
    except ImportError:  # matplotlib is always there for the notebooks
        import matplotlib.image as mpimg
        import numpy as np

        arr = mpimg.imread(io.BytesIO(raw), format="png")
        if arr.ndim == 2:
            arr = np.stack([arr] * 3, axis=-1)
        if arr.shape[-1] == 3:
            arr = np.concatenate([arr, np.ones(arr.shape[:2] + (1,), arr.dtype)], axis=-1)
        flat = arr.reshape(-1, 4)
        return {"size": (arr.shape[1], arr.shape[0]), "max_alpha": float(flat[:, 3].max()) if len(flat) else 0,
                "colours": len(np.unique(flat, axis=0)) if len(flat) else 0, "first": tuple(flat[0]) if len(flat) else None}
    with Image.open(io.BytesIO(raw)) as img:
        rgba = img.convert("RGBA")
    colours = rgba.getcolors(maxcolors=1)  # None when there are more than 1
    return {"size": rgba.size, "max_alpha": rgba.getextrema()[3][1],
            "colours": 1 if colours else 2, "first": colours[0][1] if colours else None}
