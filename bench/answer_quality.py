"""Answer quality of the embedded models, per answer mode: EM, F1, false declines, verbatim spans, latency.

Two steps, so a stopped run loses nothing and the summary can be redone without asking the LLM again:

``run``        For N seeded questions of a set, over an index of *all* of that set's paragraphs, ask
               ``plain`` (``Features()``: grounded span answers for fact lookups, free text otherwise)
               and ``full`` (``Features.all_on()`` with its decline floor off, so the answer under the
               floor is kept; the floor is applied when summarising, exactly as the pipeline applies
               it) with a cold llama.cpp prompt cache, question-major (machine noise hits both alike);
               for the first ``--baseline-questions`` also ``plain_free`` (``Features(answer_mode="free")``,
               the old answer mode) for the latency ratio and the before/after F1. One JSON line per
               question × config in ``bench/results/answer_quality_rows/SET.MODEL.jsonl``, in the row
               format of ``bench/calibration.py`` (signals, answer, F1, gold paragraph among the
               sources) plus the answer mode and whether the answer is a verbatim span of a source.
               Re-running skips rows already written.
``summarize``  Every row file → ``bench/results/answer_quality.json`` ``"sets"`` (its ``"retrieval"``
               section comes from ``bench/fusion.py`` and is kept). Confidence is recomputed from the
               stored signals with the shipped calibration (``rescore_row``), so ``full``'s decline floor
               is the one the pipeline applies today.

Question sets, chosen so nothing reported was tuned on: ``squad_dev`` — SQuAD v1.1 dev, seed 2026
(the agentic benchmark's questions; nothing in ragkit is tuned on dev); ``new_wiki`` — SQuAD-Shifts
new_wiki, seed 2026, *excluding* the calibration questions (seed 7, first 200) and the questions the
grounded prompt and span rules were chosen on (seed 101, first 400: ``dev_questions``).

Metrics per set × model × config: ``em`` / ``f1`` (SQuAD normalisation, citations stripped, a decline
scores 0); ``false_decline`` — declined although the gold paragraph was among the answer's sources,
over the questions whose gold paragraph was among them; ``span_share`` — answered questions whose
answer (citations stripped) stands verbatim in a source; ``p50_s`` — median ``AgenticRAG.ask`` seconds.

    .venv/bin/python bench/answer_quality.py run --set squad_dev --model qwen2.5-coder-0.5b --questions 200
    .venv/bin/python bench/answer_quality.py run --set new_wiki --model qwen2.5-coder-0.5b --questions 200
    .venv/bin/python bench/answer_quality.py summarize
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from squad_common import CACHE, ROOT, answer_row, run_facts
from tqdm import tqdm

from ragkit.config import ModelConfig, RagConfig
from ragkit.eval.calibration import model_calibration, read_rows, rescore_row, shipped_calibration
from ragkit.eval.experiments import index_documents, load_squad_corpus
from ragkit.pipeline.features import ALL_ON_FLOOR, Features

SETS = {"squad_dev": ROOT / "data" / "squad" / "squaddev_v1.1.json.gz", "new_wiki": ROOT / "data" / "squad" / "new_wiki_v1.0.json.gz"}
MODELS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
ROWS = ROOT / "bench" / "results" / "answer_quality_rows"
OUT = ROOT / "bench" / "results" / "answer_quality.json"
SEED = 2026
CALIBRATION_SEED, CALIBRATION_N = 7, 200  # bench/calibration.py's new_wiki questions
DEV_SEED, DEV_N = 101, 400  # where the grounded prompt and span rules were chosen


def configs() -> dict[str, Features]:
    return {"plain": Features(), "full": replace(Features.all_on(), confidence_floor=0.0), "plain_free": Features(answer_mode="free")}


def excluded_ids(set_name: str, questions: list[dict]) -> set[str]:
    if set_name != "new_wiki":
        return set()
    calibration = {q["id"] for q in random.Random(CALIBRATION_SEED).sample(questions, CALIBRATION_N)}
    return calibration | {q["id"] for q in dev_questions(questions)}


def dev_questions(questions: list[dict]) -> list[dict]:
    """new_wiki questions the grounded answer's prompt and span rules were chosen on (not the calibration ones)."""
    calibration = {q["id"] for q in random.Random(CALIBRATION_SEED).sample(questions, CALIBRATION_N)}
    return [q for q in random.Random(DEV_SEED).sample(questions, DEV_N) if q["id"] not in calibration]


def sample(set_name: str, questions: list[dict], n: int) -> list[dict]:
    excluded = excluded_ids(set_name, questions)
    return [q for q in random.Random(SEED).sample(questions, n + len(excluded)) if q["id"] not in excluded][:n]


def rows_path(set_name: str, model: str, rows_dir: Path = ROWS) -> Path:
    return rows_dir / f"{set_name}.{model}.jsonl"


def run(set_name: str, model: str, n: int, baseline_n: int, rows_dir: Path = ROWS) -> None:
    from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
    from ragkit.pipeline.engine import AgenticRAG

    docs, questions = load_squad_corpus(SETS[set_name])
    index = index_documents(docs, CACHE / f"{set_name}_index_all-MiniLM-L6-v2")
    chosen = sample(set_name, questions, n)
    path = rows_path(set_name, model, rows_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {(r["id"], r["config"]) for r in read_rows(path)}
    generator = build_chat_generator(ModelConfig(llm=model))
    generator.warm_up()
    config = RagConfig(models=ModelConfig(llm=model))
    rags = {name: AgenticRAG(features, config=config, chat_generator=generator, index=index) for name, features in configs().items()}
    for rag in rags.values():  # one-time work (sentence vectors, the span vocabulary, model load) outside every timing
        if rag.features.rerank:
            rag.prepare_sentence_vectors(progress=True)
        rag.ask("Warm-up question: when was the Eiffel Tower finished?")
    with path.open("a", encoding="utf-8") as out:
        for i, q in enumerate(tqdm(chosen, desc=f"{set_name} {model}", file=sys.stderr, mininterval=10)):
            for name, rag in rags.items():
                if (q["id"], name) in done or (name == "plain_free" and i >= baseline_n):
                    continue
                reset_prompt_cache(generator)
                out.write(json.dumps(answer_row(set_name, model, name, q, rag.ask(q["question"]))) + "\n")
                out.flush()


def summarize_rows(rows: list[dict], models: dict | None, floor: float) -> dict:
    """One set × model × config's figures; ``floor`` > 0 declines answers the calibration puts under it."""
    em = f1 = 0.0
    declined_with_gold = with_gold = answered = spans = 0
    for row in rows:
        declined = row["declined"]
        if not declined and floor > 0 and models:
            confidence, _ = rescore_row(row, models)
            declined = bool(row["signals"]) and confidence < floor
        if not declined:
            em += row["em"]
            f1 += row["f1"]
            answered += 1
            spans += bool(row.get("verbatim_span"))
        if row["gold_in_sources"]:
            with_gold += 1
            declined_with_gold += declined
    n = len(rows)
    return {
        "n": n, "em": round(em / n, 4), "f1": round(f1 / n, 4),
        "false_decline": round(declined_with_gold / with_gold, 4) if with_gold else 0.0,
        "span_share": round(spans / answered, 4) if answered else 0.0,
        "p50_s": round(statistics.median(r["seconds"] for r in rows), 3),
        "gold_in_sources": round(with_gold / n, 4), "llm_calls": round(statistics.mean(r["llm_calls"] for r in rows), 2),
    }


def summarize() -> dict:
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    calibration = shipped_calibration()
    sets: dict = {}
    for path in sorted(ROWS.glob("*.jsonl")):
        set_name, model = path.stem.split(".", 1)
        rows = read_rows(path)
        _, models = model_calibration(model, calibration)
        by_config: dict = {}
        for name in configs():
            picked = [r for r in rows if r["config"] == name]
            if picked:
                by_config[name] = summarize_rows(picked, models, ALL_ON_FLOOR if name == "full" else 0.0)
        # latency of the grounded modes against the old free mode, on the same questions in the same run
        base = {r["id"]: r["seconds"] for r in rows if r["config"] == "plain_free"}
        if base:
            for name in ("plain", "full"):
                paired = [r["seconds"] for r in rows if r["config"] == name and r["id"] in base]
                if paired and name in by_config:
                    by_config[name]["p50_ratio_to_free"] = round(statistics.median(paired) / statistics.median(base[i] for i in base), 3)
        if "plain" in by_config and "full" in by_config:
            by_config["full"]["p50_ratio_to_plain"] = round(by_config["full"]["p50_s"] / by_config["plain"]["p50_s"], 3)
        sets.setdefault(set_name, {})[model] = by_config
    data["sets"] = sets
    data["targets"] = {"full_f1": {"qwen2.5-coder-1.5b": 0.70, "qwen2.5-coder-0.5b": 0.50}, "false_decline_max": 0.05, "full_over_plain_p50_max": 1.3}
    data["command"] = "python bench/answer_quality.py run --set SET --model MODEL --questions 200; python bench/answer_quality.py summarize"
    data["run"] = run_facts()
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--set", choices=sorted(SETS), required=True)
    r.add_argument("--model", choices=MODELS, required=True)
    r.add_argument("--questions", type=int, default=200)
    r.add_argument("--baseline-questions", type=int, default=60, help="questions also asked in the old free answer mode")
    r.add_argument("--rows-dir", type=Path, default=ROWS, help="where the row files go (default: the committed ones)")
    sub.add_parser("summarize")
    args = parser.parse_args()
    if args.command == "run":
        run(args.set, args.model, args.questions, args.baseline_questions, args.rows_dir)
    else:
        print(json.dumps(summarize()["sets"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
