"""Which check tells a valid generated test-set item from an invalid one? Measured against a person's labels.

A generated item is *valid* when a person reading its source sentence would give the item's answer to its question:
the question is well formed, stands alone and asks what the sentence states, and the answer is the whole span that
answers it. ``bench/data/generated_item_labels.jsonl`` labels every single and paraphrase item of the committed
generated sets (``bench/results/eval_agreement/*.generated.jsonl``, written by the 0.5B and kept by the round trip):
27 of SQuAD dev's 78 are valid, 17 of new_wiki's 78. The round trip (the grounded answer step reading the chunk gives
the span back) keeps items the same small model answers the same way, whatever the question asks.

For each model, one forward pass each over the item's chunk, as the judge reads it:

* ``correct``: P(yes) to "according to the sources, is this answer correct?" (:func:`ragkit.eval.judge.correct_task`);
* ``likelihood``: the model's own likelihood of the answer as its grounded reply (geometric mean of token probabilities);
* ``correct_x_likelihood``: their product, the judge's default faithfulness;
* ``sufficiency``: P(yes) to "do these sources state the answer to the question?";
* ``standalone``: P(yes) to "is this a clear question about one fact, which makes sense without the text?" (no chunk).

SQuAD dev's labels choose (the signal with the highest AUC there, and its threshold by Youden's J); new_wiki's report:
AUC with a bootstrap 95% interval, and at the chosen threshold the share of valid items among those kept, the share
of valid items kept, and the share of items kept.

    .venv/bin/python bench/item_checks.py      # ~15 min on 2 cores (both models) -> bench/results/item_checks.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from haystack.dataclasses import ChatMessage  # noqa: E402

from ragkit.config import ModelConfig  # noqa: E402
from ragkit.eval.calibration import roc_auc  # noqa: E402
from ragkit.eval.experiment_sets import load_squad_corpus  # noqa: E402
from ragkit.eval.judge import LocalJudge, correct_task  # noqa: E402
from ragkit.eval.testset import squad_file  # noqa: E402
from ragkit.llm.generators import build_chat_generator  # noqa: E402
from ragkit.llm.judgments import yes_probability  # noqa: E402
from ragkit.llm.prompts import context_messages, sufficiency_task  # noqa: E402

LABELS = REPO / "bench" / "data" / "generated_item_labels.jsonl"
SETS = REPO / "bench" / "results" / "eval_agreement"
DEV, TEST = "squad_dev", "new_wiki"
SIGNALS = ("correct", "likelihood", "correct_x_likelihood", "sufficiency", "standalone")
SEED, BOOTSTRAP = 29, 1000


def standalone_messages(question: str) -> list[ChatMessage]:
    return [ChatMessage.from_user(f"Question: {question}\nIs this a clear question about one specific fact, which makes sense to someone "
                                  "who has not seen the text it was written from? Reply yes or no.")]


def labelled_items() -> list[dict]:
    """The labels joined with their items and each item's chunk (a SQuAD paragraph, indexed whole)."""
    items = {}
    for path in SETS.glob("*.generated.jsonl"):
        for line in path.read_text().splitlines():
            item = json.loads(line)
            items[item["id"]] = item
    paragraphs = {name: {d.id: d for d in load_squad_corpus(squad_file(name))[0]} for name in (DEV, TEST)}
    rows = []
    for line in LABELS.read_text().splitlines():
        label = json.loads(line)
        item = items[label["id"]]
        chunk = paragraphs[label["set"]][item["chunks"][0]]
        if item["meta"]["sentence"] not in (chunk.content or ""):
            raise SystemExit(f"{label['id']}: its sentence is not in chunk {chunk.id}")
        rows.append({**label, "chunk": chunk})
    return rows


def score(model: str, rows: list[dict]) -> list[dict]:
    generator = build_chat_generator(ModelConfig(llm=model))
    generator.warm_up()
    judge = LocalJudge(generator, task="correct_x_likelihood", model_name=model)
    scored = []
    for n, row in enumerate(rows, 1):
        question, answer, chunk = row["question"], row["answer"], row["chunk"]
        started = time.perf_counter()
        correct = yes_probability(generator, context_messages([chunk], correct_task(question, answer)), step="item_check")
        logprobs = judge.answer_logprobs(question, answer, [chunk])
        likelihood = math.exp(sum(logprobs) / len(logprobs))
        sufficiency = yes_probability(generator, context_messages([chunk], sufficiency_task(question)), step="item_check")
        standalone = yes_probability(generator, standalone_messages(question), step="item_check")
        scored.append({"id": row["id"], "set": row["set"], "valid": row["valid"], "seconds": round(time.perf_counter() - started, 2),
                       "correct": round(correct, 4), "likelihood": round(likelihood, 4), "correct_x_likelihood": round(correct * likelihood, 4),
                       "sufficiency": round(sufficiency, 4), "standalone": round(standalone, 4)})
        if n % 20 == 0:
            print(f"{model}: {n}/{len(rows)}", file=sys.stderr, flush=True)
    return scored


def auc_interval(values: list[float], valid: list[bool]) -> list[float]:
    rng, draws, pairs = random.Random(SEED), [], list(zip(values, valid))
    for _ in range(BOOTSTRAP):
        sample = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        auc = roc_auc([v for v, _ in sample], [y for _, y in sample])
        if auc == auc:
            draws.append(auc)
    draws.sort()
    return [round(draws[int(0.025 * len(draws))], 3), round(draws[int(0.975 * len(draws)) - 1], 3)]


def youden_threshold(values: list[float], valid: list[bool]) -> float:
    """The threshold (keep an item at or above it) with the largest share of valid items kept minus share of invalid kept."""
    positives, negatives = sum(valid), len(valid) - sum(valid)
    best, best_j = 0.0, -1.0
    for t in sorted(set(values)):
        kept_valid = sum(1 for v, y in zip(values, valid) if y and v >= t)
        kept_invalid = sum(1 for v, y in zip(values, valid) if not y and v >= t)
        j = kept_valid / positives - kept_invalid / negatives
        if j > best_j:
            best, best_j = t, j
    return best


def at_threshold(values: list[float], valid: list[bool], threshold: float) -> dict:
    kept = [y for v, y in zip(values, valid) if v >= threshold]
    return {"kept": len(kept), "of": len(valid), "valid_among_kept": round(sum(kept) / len(kept), 3) if kept else None,
            "valid_kept": f"{sum(kept)} of {sum(valid)}", "valid_before": round(sum(valid) / len(valid), 3)}


def figures(scored: list[dict]) -> dict:
    dev = [r for r in scored if r["set"] == DEV]
    test = [r for r in scored if r["set"] == TEST]
    out = {"median_seconds_an_item": statistics.median(r["seconds"] for r in scored), "signals": {}}
    for signal in SIGNALS:
        dev_values, dev_valid = [r[signal] for r in dev], [r["valid"] for r in dev]
        test_values, test_valid = [r[signal] for r in test], [r["valid"] for r in test]
        threshold = youden_threshold(dev_values, dev_valid)
        out["signals"][signal] = {"dev_auc": round(roc_auc(dev_values, dev_valid), 3), "test_auc": round(roc_auc(test_values, test_valid), 3),
                                  "test_auc_interval95": auc_interval(test_values, test_valid), "threshold_from_dev": threshold,
                                  "dev_at_threshold": at_threshold(dev_values, dev_valid, threshold),
                                  "test_at_threshold": at_threshold(test_values, test_valid, threshold)}
    out["chosen_on_dev"] = max(SIGNALS, key=lambda s: out["signals"][s]["dev_auc"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "item_checks.json"))
    args = parser.parse_args()
    rows = labelled_items()
    result = {"labels": {name: {"items": sum(r["set"] == name for r in rows), "valid": sum(r["valid"] for r in rows if r["set"] == name)}
                         for name in (DEV, TEST)},
              "dev": DEV, "test": TEST, "command": "python bench/item_checks.py", "models": {}}
    for model in args.models:
        scored = score(model, rows)
        result["models"][model] = {**figures(scored), "rows": scored}
        print(json.dumps({k: v for k, v in result["models"][model].items() if k != "rows"}, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
