"""`ragkit ask`, `ragkit chat` and `ragkit report` in a real terminal: tmux at 80×24 and 120×40, keys sent, the screen read.

What a person sees is asserted on the captured pane: the answer and its confidence on screen, every
trace step's name in full (never cut to "deco…"), each part's answer once, and in the chat a follow-up
read with the history, a clarification asked back and resolved by "the second", and the session
continued by a new process; in the report every measure's numbers on the measure's own line. The tmux server is
private to the test (its own socket) and killed at the end.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # ask and chat run the real embedded LLM too (marked llm)

ROOT = Path(__file__).resolve().parents[1]
STEP_NAMES = {"decompose", "per_part", "answer", "retriever", "guard", "confidence", "evidence"}
TRUNCATED_WORD = re.compile(r"\w…")


class Tmux:
    def __init__(self, socket: Path, width: int, height: int, env: dict[str, str]):
        if shutil.which("tmux") is None:
            pytest.fail("tmux is not installed (`make test` installs it)")
        self.base = ["tmux", "-S", str(socket)]
        self.env = env
        self.width, self.height = width, height

    def start(self, command: str, cwd: Path | None = None) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        where = ["-c", str(cwd)] if cwd else []
        # through `sh -c`, so the settings reach every command of a line ("ragkit eval … && ragkit tune …"), not the first only
        line = f"env {exports} sh -c {shlex.quote(command)}; sleep 600"
        subprocess.run([*self.base, "new-session", "-d", *where, "-x", str(self.width), "-y", str(self.height), line], check=True)
        subprocess.run([*self.base, "set-option", "-g", "history-limit", "5000"], check=True)

    def send(self, text: str) -> None:
        subprocess.run([*self.base, "send-keys", "-l", text], check=True)
        subprocess.run([*self.base, "send-keys", "Enter"], check=True)

    def screen(self, scrollback: bool = False) -> str:
        args = [*self.base, "capture-pane", "-p", "-J"] + (["-S", "-3000"] if scrollback else [])
        return subprocess.run(args, check=True, capture_output=True, text=True).stdout

    def wait_for(self, predicate, timeout: float, scrollback: bool = True) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen(scrollback)
            if predicate(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s; the screen:\n{self.screen()}")
            time.sleep(0.5)

    def kill(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True)


@pytest.fixture
def terminal(tmp_path):
    made: list[Tmux] = []
    env = {"RAGKIT_LLM": "qwen2.5-coder-0.5b", "RAGKIT_MAX_NEW_TOKENS": "48", "RAGKIT_DATA": str(tmp_path / "data"), "TERM": "xterm-256color",
           "HF_HUB_OFFLINE": "1", "PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", str(tmp_path)),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # a checkout run with PYTHONPATH tests its own code, not the installed one

    def make(width: int, height: int) -> Tmux:
        tmux = Tmux(tmp_path / f"tmux-{len(made)}.sock", width, height, env)  # a server each
        made.append(tmux)
        return tmux

    yield make
    for tmux in made:
        tmux.kill()


def visible_lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if line.strip()]


@pytest.mark.llm
@pytest.mark.parametrize("width,height", [(80, 24), (120, 40)])
def test_ask_decompose_reads_at_this_width(terminal, sample_index_dir, width, height):
    tmux = terminal(width, height)
    question = "Where was Nikola Tesla born, and what did he study?"
    tmux.start(f"{shlex.quote(sys.executable)} -m ragkit.ui.cli ask {shlex.quote(question)} --decompose --index-dir {shlex.quote(str(sample_index_dir))}")
    text = tmux.wait_for(lambda s: "trace" in s.lower() and re.search(r"[●◐○]\s*\d\.\d\d", s) is not None and "LLM" in s, timeout=300)
    lines = visible_lines(text)
    assert all(len(line) <= width for line in lines)
    assert not TRUNCATED_WORD.search(text), "a word cut with …:\n" + text
    assert "Smiljan" in text, text
    assert "Loading weights" not in text, text  # transformers' bar for the embedder: noise above the answer
    # each part's answer once: the parts are listed, not repeated under the answer
    assert text.count("Smiljan") <= 2, text  # the answer and its cited source line at most
    names = {m for m in STEP_NAMES if re.search(rf"(?m)^\W*{m}\b", text)}
    assert {"decompose", "per_part"} <= names, text


@pytest.mark.llm
@pytest.mark.parametrize("width,height", [(80, 24), (120, 40)])
def test_chat_follow_up_clarification_and_a_second_process(terminal, sample_index_dir, tmp_path, width, height):
    sessions = tmp_path / f"sessions-{width}.sqlite"
    command = (f"{shlex.quote(sys.executable)} -m ragkit.ui.cli chat --session tesla --sessions-file {shlex.quote(str(sessions))} "
               f"--follow-up-backend rules --index-dir {shlex.quote(str(sample_index_dir))}")
    tmux = terminal(width, height)
    tmux.start(command)
    tmux.wait_for(lambda s: "you›" in s, timeout=240)
    prompts = lambda s: s.count("you›")  # noqa: E731

    tmux.send("Where was Nikola Tesla born?")
    text = tmux.wait_for(lambda s: prompts(s) >= 2, timeout=240)
    assert "Smiljan" in text and re.search(r"[●◐○]\s*\d\.\d\d", text), text

    tmux.send("and what did he study?")
    text = tmux.wait_for(lambda s: prompts(s) >= 3, timeout=240)
    assert re.search(r"read as.*Tesla", text), text  # the rewrite is shown

    tmux.send("/trace")
    text = tmux.wait_for(lambda s: prompts(s) >= 4, timeout=60)
    trace = text[text.rfind("/trace"):]
    assert "follow_up" in trace and "answer" in trace, trace
    assert not TRUNCATED_WORD.search(trace), trace
    assert all(len(line) <= width for line in visible_lines(trace))

    tmux.send("/new")
    tmux.wait_for(lambda s: prompts(s) >= 5, timeout=60)
    tmux.send("When was he born?")
    text = tmux.wait_for(lambda s: prompts(s) >= 6, timeout=240)
    asked = text[text.rfind("When was he born?"):]
    assert "Genghis Khan" in asked and "Nikola Tesla" in asked, asked
    tmux.send("the second" if asked.find("Nikola Tesla") > asked.find("Genghis Khan") else "the first")
    text = tmux.wait_for(lambda s: prompts(s) >= 7, timeout=240)
    answered = text[text.rfind("you›", 0, text.rfind("you›")):]
    assert "answering about Nikola Tesla" in answered and re.search(r"[●◐○]\s*\d\.\d\d", answered), answered
    assert "Nikola_Tesla.md" in answered and "Genghis_Khan.md" not in answered, answered  # answered in the chosen scope
    screen = tmux.screen()
    assert all(len(line) <= width for line in visible_lines(screen))
    tmux.send("/quit")

    # a new process on the same session file continues the conversation where it left off
    again = terminal(width, height)
    again.start(command)
    text = again.wait_for(lambda s: "you›" in s, timeout=240)
    assert "and what did he study?" in text or "Tesla" in text, text


def test_report_reads_at_80_columns(terminal, sample_index, tmp_path):
    """Two real run folders (real retrieval over sample_docs; a scripted LLM, as the report is what is looked at)."""
    from haystack.components.generators.chat import MockChatGenerator

    from ragkit.config import ModelConfig, RagConfig
    from ragkit.eval.runs import EvalRun
    from ragkit.eval.strategies import resolve
    from ragkit.eval.testset import EvalItem, save_testset
    from ragkit.pipeline.engine import AgenticRAG

    config = RagConfig(models=ModelConfig(llm="qwen2.5-coder-0.5b"))
    asked = {"Where was Nikola Tesla born?": "Smiljan", "Which team won Super Bowl 50?": "Denver Broncos", "Who founded the Yuan dynasty?": "Kublai Khan"}
    items = [EvalItem(q, [a], kind="single", chunks=[next(i for i, c in sample_index.chunks.items() if a in c.content)]) for q, a in asked.items()]
    path = save_testset(items, tmp_path / "set.jsonl")
    for strategy, reply in (("plain", "Smiljan [1]."), ("sparse_only", "The Denver Broncos [1].")):  # what they get right is not the point
        llm = MockChatGenerator(response_fn=(lambda text: lambda messages: text)(reply))
        run = EvalRun.open(tmp_path / "runs" / strategy, resolve(strategy), config, path, items, known_chunks=set(sample_index.chunks))
        run.execute(AgenticRAG(resolve(strategy).features, config=config, index=sample_index, chat_generator=llm))

    tmux = terminal(80, 24)
    runs = " ".join(shlex.quote(str(tmp_path / "runs" / name)) for name in ("plain", "sparse_only"))
    tmux.start(f"{shlex.quote(sys.executable)} -m ragkit.ui.cli report {runs}")
    text = tmux.wait_for(lambda s: "flipped between right and wrong" in s, timeout=60)
    lines = visible_lines(text)
    assert all(len(line) <= 80 for line in lines), text  # -J joins what the terminal wrapped: a longer line was folded
    assert not TRUNCATED_WORD.search(text), text
    # each measure compared: its name, n, both means, the difference and the interval on one line
    compared = [line for line in lines if re.match(r"\s*(recall@k|mrr|ndcg|em|f1|correct)\s+\d+\s+\d\.\d{3}\s+\d\.\d{3}\s+[+-]\d\.\d{3}\s+\[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", line)]
    assert len(compared) >= 4, text
    assert "sparse_only (B) vs plain (A): 3 questions in both" in text and "no significant" in text and "McNemar" in text, text
    assert re.search(r"(?m)^\s*correct\s+\d\.\d{3} \(n=3\)\s+\d\.\d{3} \(n=3\)\s*$", text), text  # the aggregates: a measure a row
    assert re.search(r"\d question(s)? flipped between right and wrong", text), text


@pytest.mark.llm
def test_eval_and_tune_read_at_80_columns(terminal, sample_index, sample_index_dir, tmp_path):
    """`ragkit eval` then `ragkit tune` as a user runs them (the real 0.5B, no judge): the run's measures a row each,
    and tune's candidates with why one was chosen, then the reporting half — every line within 80 columns."""
    from ragkit.eval.testset import EvalItem, save_testset

    asked = {"Where was Nikola Tesla born?": "Smiljan", "Which team won Super Bowl 50?": "Denver Broncos",
             "Who founded the Yuan dynasty?": "Kublai Khan", "Which team did the Denver Broncos beat in Super Bowl 50?": "Carolina Panthers"}
    items = [EvalItem(q, [a], kind="single", chunks=[next(i for i, c in sample_index.chunks.items() if a in c.content)]) for q, a in asked.items()]
    testset = save_testset(items, tmp_path / "set.jsonl")
    common = f"--index-dir {shlex.quote(str(sample_index_dir))} --testset {shlex.quote(str(testset))} --judge-llm none " \
             f"--runs-dir runs --cache {shlex.quote(str(tmp_path / 'cache.sqlite'))}"
    cli = f"{shlex.quote(sys.executable)} -m ragkit.ui.cli"
    tmux = terminal(80, 24)
    # from the test's folder, as a user runs it from theirs: the run's path is printed as given, and an absolute temp path
    # ran past 80 columns once pytest's numbered folder reached pytest-100 (rich then folded "…/runs/plain: 4 rows")
    tmux.start(f"{cli} eval --features plain {common} && {cli} tune --strategies plain,sparse_only --latency-budget 120 {common}", cwd=tmp_path)
    text = tmux.wait_for(lambda s: "tune.json" in s or "error" in s, timeout=400)
    lines = visible_lines(text)
    assert all(len(line) <= 80 for line in lines), text  # -J joins what the terminal wrapped: a longer line was folded
    assert not TRUNCATED_WORD.search(text) and "Loading weights" not in text, text
    # eval: where the run is, then each measure on its own line with what it was computed over
    assert re.search(r"(?m)^.*runs/plain: 4 rows$", text), text
    assert re.search(r"(?m)^recall@k +\d\.\d{3} \(n=4\)$", text) and re.search(r"(?m)^correct +\d\.\d{3} \(n=4\)$", text), text
    # tune: a bar a run, each candidate on the tuning half with its quality over n and its p50, the choice marked
    assert re.search(r"tune half: sparse_only: 100%\|.*\| 2/2", text), text
    assert "Tuning half (2 questions): correct and p50 seconds, latency budget 120 s p50" in text, text
    assert "Searched: every one of 2 strategies run." in text, text
    candidates = [line for line in lines if re.match(r"(plain|sparse_only) +\d\.\d{3} \(n=2\) +\d+\.\d{3}", line)]
    assert len(candidates) == 2 and sum("chosen" in line for line in candidates) == 1, text
    chosen = next(line.split()[0] for line in candidates if "chosen" in line)
    if chosen != "plain":  # the choice against the baseline on the other half, each measure's numbers on its line
        assert f"{chosen} (B) vs plain (A): 2 questions in both" in text and "On the reporting half (2 questions)" in text, text
        assert re.search(r"(?m)^correct +2 +\d\.\d{3} +\d\.\d{3} +[+-]\d\.\d{3} +\[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", text), text
    else:
        assert "plain was chosen: it is the baseline" in text, text
