"""Shared pieces of the SQuAD benchmarks: data loading, the index of all dev paragraphs, SQuAD's
official answer normalisation (EM / F1), and the run's machine facts."""

from __future__ import annotations

import os
import platform
import random
import subprocess
from importlib import metadata
from pathlib import Path

from haystack import Document

from ragkit.eval.experiments import index_documents, load_squad_corpus

ROOT = Path(__file__).resolve().parent.parent
SQUAD_DEV = ROOT / "data" / "squad" / "squaddev_v1.1.json.gz"
CACHE = ROOT / "bench" / ".cache"


def load_squad(path: Path = SQUAD_DEV) -> tuple[list[Document], list[dict]]:
    """Every dev paragraph as a Document (id ``article-paragraph``) and every question with its
    gold answers and paragraph id."""
    return load_squad_corpus(path)


# bench/eval_agreement.py's SQuAD dev sample (its SEED, --paragraphs 300): choices made on dev questions stay outside it
AGREEMENT_SEED, AGREEMENT_PARAGRAPHS = 29, 300


def agreement_paragraph_ids(docs: list[Document]) -> set[str]:
    """The SQuAD dev paragraphs whose questions bench/eval_agreement.py scores."""
    return set(random.Random(AGREEMENT_SEED).sample([d.id for d in docs], AGREEMENT_PARAGRAPHS))


def squad_index(docs: list[Document], embedder: str = "all-MiniLM-L6-v2"):
    """A RagIndex of all paragraphs (one chunk each), built once and kept under bench/.cache."""
    return index_documents(docs, CACHE / f"squad_dev_index_{embedder}", embedder=embedder, progress=True)


# SQuAD's answer normalisation, EM and F1 live in the package (the notebooks use them too).
from ragkit.eval.metrics import exact_match, f1_score, normalize_answer, strip_citations  # noqa: E402,F401


# -- run facts ---------------------------------------------------------------------------------
def run_facts() -> dict:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = [x.strip() for x in subprocess.run(["git", "status", "--porcelain", "ragkit", "bench"], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.splitlines()]
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "?", []
    return {
        "git_commit": commit,
        "uncommitted_changes": dirty,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {d: version(d) for d in ("haystack-ai", "llama_cpp_python", "sentence-transformers", "faiss-cpu", "bm25s", "torch")},
    }


def answer_row(set_name: str, model: str, config: str, question: dict, result) -> dict:
    """One benchmark row for a question's ``AgenticResult``: the answer, its SQuAD scores, whether the
    gold paragraph was among the sources, and the signals the confidence read (bench/calibration.py
    and bench/answer_quality.py write the same rows)."""
    from ragkit.eval.calibration import AGENTIC_SIGNALS, CORRECT_F1

    r, q = result, question
    f1 = 0.0 if r.declined else f1_score(r.answer, q["answers"])
    return {
        "set": set_name, "model": model, "config": config, "id": q["id"], "question": q["question"], "gold": q["answers"][:3],
        "answer": r.answer, "declined": r.declined, "f1": round(f1, 4), "em": 0.0 if r.declined else exact_match(r.answer, q["answers"]),
        "correct": f1 >= CORRECT_F1, "gold_in_sources": any(d.id == q["doc_id"] for d in r.sources),
        "answer_mode": r.answer_mode, "verbatim_span": r.evidence is not None,
        "signals": {k: v for k, v in (r.details.get("confidence") or {}).items() if k in AGENTIC_SIGNALS},
        "failed_steps": r.failed_steps, "exit_reason": r.exit_reason, "route": r.route,
        "confidence_at_run": r.confidence, "seconds": round(r.seconds, 3), "llm_calls": r.trace.llm_calls,
    }
