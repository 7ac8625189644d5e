"""Concurrent users on the served pipeline: the LLM in-process vs behind llama.cpp's server.

One exported pipeline (plain hybrid RAG on every SQuAD dev paragraph, ``answer_mode="free"``: an answer
written with citations, greedy decoding, at most ``--max-tokens`` tokens) is served twice by
``ragkit serve`` (Hayhooks), one server at a time on this machine:

* ``in_process`` — the model inside the Hayhooks process; questions wait for each other (one model,
  not thread-safe: one question at a time);
* ``llm_server`` — ``ragkit serve --llm-server --parallel N``: llama-server with N slots decoding the
  busy requests in one batch, the pipeline's generator an ``OpenAIChatGenerator`` on it.

For each: 1, 2, 4 and 8 concurrent users, each asking ``--per-user`` different SQuAD dev questions one
after the other through the OpenAI-compatible chat endpoint with ``"stream": true``. Reported per
level: time to first token (the first streamed answer text) and to the full answer, p50 / p95;
questions per minute (answered questions over the level's wall time); errors (HTTP errors, error
replies, streams that end without an answer); peak RSS of the server processes. A warm-up question
first (loads the models), not counted.

Same answers: ``--parity`` questions asked one at a time through ``/ragkit/run`` on each server;
the share of identical answer texts, and every differing pair.

    .venv/bin/python bench/load.py --model qwen2.5-coder-0.5b --per-user 3 --parity 50

Writes ``bench/results/load.json``. Latency is this machine's (2 cores): the in-process baseline and
the served LLM run on it in the same process of this script, one after the other.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from answer_quality import SETS
from squad_common import CACHE, ROOT, run_facts

OUT = ROOT / "bench" / "results" / "load.json"
RAGKIT = str(Path(sys.executable).with_name("ragkit"))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Server:
    """``ragkit serve`` on a free port, stopped by its pid (SIGINT; its llama-server child dies with it)."""

    def __init__(self, yaml_path: Path, served: bool, parallel: int, log: Path):
        from ragkit.index.servers import free_port

        self.port = free_port()
        command = [RAGKIT, "serve", str(yaml_path), "--port", str(self.port)]
        if served:
            command += ["--llm-server", "--parallel", str(parallel)]
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        self.peak_rss: dict[str, int] = {}
        self._sampling = True
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ragkit serve exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/status", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError(f"ragkit serve did not start: {log.read_text()[-2000:]}")
        threading.Thread(target=self._sample_memory, daemon=True).start()

    def _sample_memory(self) -> None:
        root = psutil.Process(self.process.pid)
        while self._sampling:
            try:
                rows = {"hayhooks": root.memory_info().rss}
                for child in root.children(recursive=True):
                    name = "llama_server" if "llama-server" in child.name() else child.name()
                    rows[name] = rows.get(name, 0) + child.memory_info().rss
                for name, rss in rows.items():
                    self.peak_rss[name] = max(self.peak_rss.get(name, 0), rss)
            except psutil.Error:
                pass
            time.sleep(0.5)

    def stop(self) -> list[int]:
        """Stop by pid; the pids of children still alive afterwards (should be none)."""
        self._sampling = False
        children = psutil.Process(self.process.pid).children(recursive=True)
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        gone, alive = psutil.wait_procs(children, timeout=15)
        return [p.pid for p in alive]


def ask_streaming(url: str, question: str) -> dict:
    """One chat completion with ``stream: true``: time to the first answer text and to the end."""
    body = {"model": "ragkit", "stream": True, "messages": [{"role": "user", "content": question}]}
    start = time.perf_counter()
    first = None
    text = []
    try:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as reply:
            if reply.status_code != 200:
                return {"error": f"HTTP {reply.status_code}"}
            for line in reply.iter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                delta = json.loads(line[5:])["choices"][0].get("delta", {}).get("content") or ""
                if delta and first is None:
                    first = time.perf_counter() - start
                text.append(delta)
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, IndexError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    reply_text = "".join(text)
    if first is None or reply_text.lstrip().startswith("error:") or "\n\nerror:" in reply_text:
        return {"error": f"no answer: {reply_text[:200]!r}"}
    return {"ttft_s": first, "total_s": time.perf_counter() - start, "reply": reply_text}


def load_level(url: str, questions: list[str], users: int, per_user: int) -> dict:
    rows: list[dict] = []
    lock = threading.Lock()

    def user(i: int) -> None:
        for question in questions[i * per_user:(i + 1) * per_user]:
            row = ask_streaming(url, question)
            with lock:
                rows.append(row)

    start = time.perf_counter()
    threads = [threading.Thread(target=user, args=(i,)) for i in range(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ok = [r for r in rows if "error" not in r]
    ttft = [r["ttft_s"] for r in ok]
    total = [r["total_s"] for r in ok]
    return {
        "users": users, "questions": len(rows), "answered": len(ok), "errors": len(rows) - len(ok),
        "error_kinds": sorted({r["error"][:120] for r in rows if "error" in r}),
        "ttft_p50_s": round(percentile(ttft, 0.5), 3) if ttft else None, "ttft_p95_s": round(percentile(ttft, 0.95), 3) if ttft else None,
        "answer_p50_s": round(percentile(total, 0.5), 3) if total else None, "answer_p95_s": round(percentile(total, 0.95), 3) if total else None,
        "questions_per_minute": round(len(ok) / wall * 60, 2), "wall_s": round(wall, 1),
    }


def ask_plain(url: str, question: str) -> dict:
    reply = httpx.post(f"{url}/ragkit/run", json={"question": question}, timeout=600)
    reply.raise_for_status()
    return reply.json()["result"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--users", default="1,2,4,8")
    parser.add_argument("--per-user", type=int, default=3, help="questions each user asks, one after the other")
    parser.add_argument("--parallel", type=int, default=4, help="llama-server slots")
    parser.add_argument("--parity", type=int, default=50, help="questions asked one at a time on both servers, answers compared")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--backends", default="in_process,llm_server")
    args = parser.parse_args()

    from ragkit.config import ModelConfig, RagConfig
    from ragkit.eval.experiments import index_documents, load_squad_corpus
    from ragkit.pipeline.export import export_yaml
    from ragkit.pipeline.features import Features

    docs, questions = load_squad_corpus(SETS["squad_dev"])
    index_dir = CACHE / "squad_dev_index_all-MiniLM-L6-v2"
    index_documents(docs, index_dir)
    rng = random.Random(1)
    parity_questions = [q["question"] for q in rng.sample(questions, args.parity)]
    levels = [int(u) for u in args.users.split(",")]
    rest = [q["question"] for q in questions if q["question"] not in set(parity_questions)]
    load_questions = random.Random(2).sample(rest, max(levels) * args.per_user)

    features = Features(answer_mode="free")
    config = RagConfig(models=ModelConfig(llm=args.model, max_new_tokens=args.max_tokens))
    results: dict = {"model": args.model, "features": "Features(answer_mode='free')", "max_tokens": args.max_tokens, "parallel": args.parallel,
                     "per_user": args.per_user, "backends": {}}
    answers: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="ragkit-load-") as folder:
        yaml_path = Path(folder) / "pipeline.yaml"
        yaml_path.write_text(export_yaml(features, index_dir, config), encoding="utf-8")
        for backend in args.backends.split(","):
            print(f"== {backend}", flush=True)
            server = Server(yaml_path, served=backend == "llm_server", parallel=args.parallel, log=Path(folder) / f"{backend}.log")
            try:
                warm = ask_streaming(server.url, "Which team won Super Bowl 50?")
                entry: dict = {"warm_up": {k: v for k, v in warm.items() if k != "reply"}, "levels": []}
                answers[backend] = []
                for question in parity_questions:
                    answers[backend].append(ask_plain(server.url, question)["answer"])
                for users in levels:
                    level = load_level(server.url, load_questions, users, args.per_user)
                    print(json.dumps(level), flush=True)
                    entry["levels"].append(level)
            finally:
                left = server.stop()
            entry["peak_rss_mb"] = {name: round(rss / 2**20) for name, rss in server.peak_rss.items()}
            entry["processes_left_after_stop"] = left
            results["backends"][backend] = entry
    if len(answers) == 2:
        a, b = answers["in_process"], answers["llm_server"]
        results["same_answers"] = {
            "questions": len(a), "identical": round(statistics.mean(x == y for x, y in zip(a, b)), 4),
            "differing": [{"question": q, "in_process": x, "llm_server": y} for q, x, y in zip(parity_questions, a, b) if x != y],
        }
    results["command"] = "python bench/load.py " + " ".join(sys.argv[1:])
    results["run"] = run_facts()
    OUT.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in results.items() if k != "run"}, indent=1)[:5000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
