"""Calibrate confidence on one question set, score it on another.

Confidence should be the probability that the answer is correct (F1 >= 0.5 against gold; see
``ragkit.eval.calibration.DEFINITION``). Three steps, each its own sub-command so a stopped run loses
nothing and the fit can be redone without asking the LLM again:

``collect``  For N seeded questions of the calibration set (``new_wiki``: SQuAD-Shifts), over an
             index of *all* its paragraphs, run ``plain`` (``Features()``) and ``full`` (``Features.all_on()``
             with its decline floor off, so the answer under the floor is kept; the floor is applied
             when scoring, exactly as the pipeline applies it) with a cold prompt cache, and append
             one row per question × config to ``bench/results/calibration_rows/SET.MODEL.jsonl``:
             the signals ``ConfidenceScorer`` reads, the answer, F1, whether the gold paragraph was
             among the sources, failed steps. Re-running skips question ids already written.
``fit``      Fit the per-model logistic models on the calibration set's rows → ``ragkit/data/confidence_calibration.json``:
             ``base`` (scored on plain's answers) and ``agentic`` (on full's) each pick, by held-out log
             loss on this set (folds by question), between all signals on their own configuration's
             answers and the core signals (:data:`ragkit.eval.calibration.CORE_SIGNALS`) on both
             configurations' answers; ``lacks_answer`` on both.
``score``    The scored rows are ``bench/answer_quality.py``'s on SQuAD v1.1 dev (``run --set squad_dev``:
             seed 2026, all 2,067 paragraphs indexed, the same ``plain`` / ``full`` configurations, the
             same row format), so one run per model serves both reports.
             Recompute every scored row's confidence with the shipped calibration (and the rules:
             a decline is 0, a failed step is capped under 0.5, full's floor declines) →
             ``bench/results/calibration.json`` (ECE over 10 equal-width bins, ROC AUC, share of ●
             answers correct) and ``calibration.md``.

    .venv/bin/python bench/calibration.py collect --set new_wiki --model qwen2.5-coder-0.5b --questions 200
    .venv/bin/python bench/answer_quality.py run --set squad_dev --model qwen2.5-coder-0.5b --questions 200
    .venv/bin/python bench/calibration.py fit
    .venv/bin/python bench/calibration.py score
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

from squad_common import CACHE, ROOT, answer_row, run_facts
from tqdm import tqdm

from ragkit.eval.calibration import (
    AGENTIC_SIGNALS, BASE_SIGNALS, CALIBRATION_FILE, CORE_SIGNALS, DEFINITION, GROUNDED_SIGNALS, RETRIEVAL_SIGNALS, fit_model_cv, read_rows, reliability_bins,
    rescore_row, score, select_fit,
)
from ragkit.config import ModelConfig, RagConfig
from ragkit.eval.experiments import index_documents, load_squad_corpus
from ragkit.pipeline.features import Features

SETS = {"new_wiki": ROOT / "data" / "squad" / "new_wiki_v1.0.json.gz", "squad_dev": ROOT / "data" / "squad" / "squaddev_v1.1.json.gz"}
CALIBRATE_ON, SCORE_ON = "new_wiki", "squad_dev"
MODELS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
ROWS = ROOT / "bench" / "results" / "calibration_rows"
OUT = ROOT / "bench" / "results" / "calibration.json"
SEED = 7  # not the agentic benchmark's 2026: other questions of the same set
ANSWER_QUALITY_SEED = 2026


def configs() -> dict[str, Features]:
    return {"plain": Features(), "full": replace(Features.all_on(), confidence_floor=0.0)}


SCORED_ROWS = "answer_quality_rows/" + SCORE_ON + ".{model}.jsonl"  # relative to bench/results
# rows from before grounded answers, still the scored rows of a model whose answer_quality run is not in yet
FREE_MODE_ROWS = "calibration_rows/" + SCORE_ON + ".{model}.jsonl"


def scored_rows(model: str) -> str:
    """The scored rows' file for ``model`` relative to bench/results: answer_quality.py's, else the free-mode ones."""
    return SCORED_ROWS if (OUT.parent / SCORED_ROWS.format(model=model)).exists() else FREE_MODE_ROWS


def rows_path(set_name: str, model: str) -> Path:
    return ROWS / f"{set_name}.{model}.jsonl"


def collect(set_name: str, model: str, n: int, seed: int) -> None:
    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.llm.generators import build_chat_generator, reset_prompt_cache

    docs, questions = load_squad_corpus(SETS[set_name])
    index = index_documents(docs, CACHE / f"{set_name}_index_all-MiniLM-L6-v2")
    sample = random.Random(seed).sample(questions, n)
    path = rows_path(set_name, model)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {(r["id"], r["config"]) for r in read_rows(path)}
    generator = build_chat_generator(ModelConfig(llm=model))
    generator.warm_up()
    config = RagConfig(models=ModelConfig(llm=model))
    rags = {name: AgenticRAG(features, config=config, chat_generator=generator, index=index) for name, features in configs().items()}
    for rag in rags.values():
        if rag.features.rerank:
            rag.prepare_sentence_vectors(progress=True)
        rag.ask("Warm-up question: what is the capital of France?")
    with path.open("a", encoding="utf-8") as out:
        for q in tqdm(sample, desc=f"{set_name} {model}", file=sys.stderr, mininterval=10):
            for name, rag in rags.items():
                if (q["id"], name) in done:
                    continue
                reset_prompt_cache(generator)
                out.write(json.dumps(answer_row(set_name, model, name, q, rag.ask(q["question"]))) + "\n")
                out.flush()


def fit() -> dict:
    calibration = {"definition": DEFINITION, "calibrated_on": f"SQuAD-Shifts new_wiki ({CALIBRATE_ON}), questions seeded {SEED}, all its paragraphs indexed",
                   "command": "python bench/calibration.py fit", "models": {}}
    for model in MODELS:
        rows = read_rows(rows_path(CALIBRATE_ON, model))
        plain = [r for r in rows if r["config"] == "plain" and not r["declined"]]
        full = [r for r in rows if r["config"] == "full" and not r["declined"]]
        if len(plain) < 30 or len(full) < 30:
            print(f"{model}: {len(plain)} plain / {len(full)} full answered calibration rows — too few to fit, skipped", file=sys.stderr)
            continue
        everything = [r for r in rows if r["signals"]]
        answered = [r for r in plain + full if r["signals"]]
        # Candidate fits, chosen per model by held-out log loss on this (calibration) set only:
        # all signals on the configuration's own answers, or the core signals on both configurations'.
        base = {"all signals, plain answers": (plain, BASE_SIGNALS), "core signals, plain + full answers": (answered, CORE_SIGNALS),
                "core + evidence signals, plain + full answers": (answered, GROUNDED_SIGNALS)}
        agentic = {"all signals, full answers": (full, AGENTIC_SIGNALS), "core signals, plain + full answers": (answered, CORE_SIGNALS),
                   "core + grade + support, full answers": (full, CORE_SIGNALS + ("grade_max", "support")),
                   "core + evidence + support, full answers": (full, GROUNDED_SIGNALS + ("support",))}
        calibration["models"][model] = {
            "answer": {"base": select_fit(base, [r for r in plain if r["signals"]]), "agentic": select_fit(agentic, [r for r in full if r["signals"]])},
            "lacks_answer": fit_model_cv([r["signals"] for r in everything], [not r["gold_in_sources"] for r in everything], RETRIEVAL_SIGNALS),
            "rows": {"plain": len(plain), "full": len(full)},
        }
        calibration["models"][model]["floor_analysis"] = floor_analysis([r for r in rows if r["config"] == "full"], calibration["models"][model])
    CALIBRATION_FILE.parent.mkdir(parents=True, exist_ok=True)
    CALIBRATION_FILE.write_text(json.dumps(calibration, indent=1) + "\n", encoding="utf-8")
    return calibration


FLOOR_GRID = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35)


def floor_analysis(rows: list[dict], models: dict) -> list[dict]:
    """What each decline floor would do to ``full`` on the calibration set: answers declined, mean F1
    (a decline scores 0) and the share of the remaining answers that are right — the basis on which
    ``Features.all_on()``'s floor is chosen, on calibration data only."""
    out = []
    for floor in FLOOR_GRID:
        kept = [(r, rescore_row(r, models, floor)) for r in rows]
        answered = [(r, c) for r, (c, _) in kept if c > 0]
        out.append({
            "floor": floor,
            "declined": round(1 - len(answered) / len(rows), 4) if rows else None,
            "f1": round(sum(r["f1"] for r, _ in answered) / len(rows), 4) if rows else None,
            "answered_correct": round(sum(r["correct"] for r, _ in answered) / len(answered), 4) if answered else None,
        })
    return out


def score_all() -> dict:
    calibration = json.loads(CALIBRATION_FILE.read_text(encoding="utf-8"))
    floor = Features.all_on().confidence_floor
    report = {"definition": DEFINITION, "calibrated_on": calibration["calibrated_on"],
              "scored_on": f"SQuAD v1.1 dev ({SCORE_ON}), bench/answer_quality.py's questions (seeded {ANSWER_QUALITY_SEED}), all 2,067 paragraphs indexed; none used for calibration",
              "scored_set": SCORE_ON, "command": "python bench/calibration.py score", "full_floor": floor, "models": {}, "run": run_facts()}
    for model in MODELS:
        pattern = scored_rows(model)
        rows = read_rows(OUT.parent / pattern.format(model=model))
        if model not in calibration["models"] or not rows:
            continue
        # rows from before grounded answers carry no answer_mode: their answers were all free text
        entry = {"configs": {}, "reliability": {}, "scored_rows": pattern, "answer_modes": sorted({r.get("answer_mode") or "free" for r in rows})}
        pairs_by_config = {}
        for config in ("plain", "full"):
            models = calibration["models"][model]
            pairs = [rescore_row(r, models, floor if config == "full" else 0.0) for r in rows if r["config"] == config]
            if not pairs:
                continue
            pairs_by_config[config] = pairs
            confidences, correct = [c for c, _ in pairs], [y for _, y in pairs]
            entry["configs"][config] = score(confidences, correct)
            entry["reliability"][config] = reliability_bins(confidences, correct)
        report["models"][model] = entry
        draw(model, pairs_by_config)
    earlier = json.loads(OUT.read_text()) if OUT.exists() else {}
    report.update({k: v for k, v in earlier.items() if k.startswith("refit")})  # bench/calibration_refit.py's sections are its own
    OUT.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    OUT.with_suffix(".md").write_text(markdown_table(report), encoding="utf-8")
    return report


def draw(model: str, pairs_by_config: dict[str, list[tuple[float, bool]]]) -> Path:
    """The README's reliability diagram for one model (docs/images/reliability_MODEL.png)."""
    from ragkit.ui import plots

    fig = plots.reliability_diagram(pairs_by_config, title=f"{model} on {SCORE_ON} (calibrated on {CALIBRATE_ON})")
    path = ROOT / "docs" / "images" / f"reliability_{model.replace('qwen2.5-coder-', '')}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def markdown_table(report: dict) -> str:
    lines = ["| model | answer modes | config | n | ECE | ROC AUC | ● answers correct | ● answers | mean confidence | share correct |", "|" + " --- |" * 10]
    for model, entry in report["models"].items():
        modes = " + ".join(entry.get("answer_modes") or ["free"])
        for config, c in entry["configs"].items():
            hs = "n/a" if c["high_share_correct"] is None else f"{c['high_share_correct']:.2f}"
            lines.append(f"| {model.replace('qwen2.5-coder-', '')} | {modes} | {config} | {c['n']} | {c['ece']:.3f} | {c['auc']:.3f} | {hs} | {c['high_n']} | {c['mean_confidence']:.2f} | {c['share_correct']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--set", choices=[CALIBRATE_ON], default=CALIBRATE_ON, help="the calibration set (the scored rows come from answer_quality.py)")
    c.add_argument("--model", default=MODELS[0])
    c.add_argument("--questions", type=int, default=200)
    c.add_argument("--seed", type=int, default=SEED)
    sub.add_parser("fit")
    sub.add_parser("score")
    args = parser.parse_args()
    t0 = time.time()
    if args.command == "collect":
        collect(args.set, args.model, args.questions, args.seed)
    elif args.command == "fit":
        print(json.dumps({m: v["rows"] for m, v in fit()["models"].items()}), file=sys.stderr)
    else:
        print(markdown_table(score_all()))
    print(f"{args.command}: {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
