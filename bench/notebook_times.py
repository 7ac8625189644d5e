"""Restart-and-run-all wall time of every notebook, measured the way a learner runs it: JupyterLab in
Chromium, Kernel → Restart Kernel and Run All Cells, from confirming the restart until every cell has
its execution count and the kernel is idle. One notebook at a time, one fresh server for the run.

    .venv/bin/python bench/notebook_times.py                     # all notebooks, full mode -> bench/results/notebook_times.json
    .venv/bin/python bench/notebook_times.py 02_query_routing    # some; merged into the committed JSON
    .venv/bin/python bench/notebook_times.py --quick --out /tmp/quick.json 02_query_routing   # CI's small variant

Full mode is what a learner gets: RAGKIT_QUICK is removed from the notebooks' environment. Index and
model files are reused from earlier runs (the notebooks build their index incrementally), as on a
learner's second run. The JSON is ``{NOTEBOOK_NAME: seconds}``; the run facts are printed.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jupyterlab_driver import JupyterLab, LabPage, chromium

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
RESULTS = ROOT / "bench" / "results" / "notebook_times.json"
SHOTS = ROOT / ".browser-shots" / "bench"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebook names (stem, e.g. 01_quickstart); default: all in notebooks/")
    parser.add_argument("--quick", action="store_true", help="RAGKIT_QUICK=1: the notebooks' small CI variant")
    parser.add_argument("--out", type=Path, help=f"JSON to write (default {RESULTS.relative_to(ROOT)}; required with --quick)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed per notebook (default 1800)")
    args = parser.parse_args(argv)
    if args.quick and args.out is None:
        parser.error("--quick needs --out: bench/results/notebook_times.json holds full-mode times only")
    out = args.out or RESULTS

    paths = [NOTEBOOKS / f"{n.removesuffix('.ipynb')}.ipynb" for n in args.names] or sorted(NOTEBOOKS.glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")

    times = json.loads(out.read_text()) if out.exists() and args.names else {}
    env = {"RAGKIT_QUICK": "1"} if args.quick else {}
    unset = () if args.quick else ("RAGKIT_QUICK",)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    print(f"# {'quick' if args.quick else 'full'} mode, commit {commit}, {platform.node()}, python {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="ragkit-lab-") as workdir, chromium() as browser, \
            JupyterLab(ROOT, workdir, env=env, unset_env=unset) as lab:
        for path in paths:
            rel = str(path.relative_to(ROOT))
            page = LabPage.open(browser, lab, rel)
            try:
                t0 = time.monotonic()
                seconds = page.restart_and_run_all(timeout=args.timeout)
                page.scroll_notebook("bottom")
                page.screenshot(SHOTS / f"{path.stem}.png")
            except Exception:
                print(f"{path.stem}: failed after {time.monotonic() - t0:.0f} s; server log tail:\n{lab.log_tail()}", file=sys.stderr)
                raise
            finally:
                page.close()
            times[path.stem] = round(seconds, 1)
            print(f"{path.stem:45s} {seconds:7.1f} s", flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(dict(sorted(times.items())), indent=2) + "\n")  # after each: a later failure keeps it
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
