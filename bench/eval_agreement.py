"""Does a generated test set rank strategies the way real questions do? (issue 29's acceptance figure)

For a SQuAD set (``squad_dev`` or ``new_wiki``): a seeded sample of paragraphs is indexed (one chunk
each); ``ragkit.eval.generate`` writes a test set from those paragraphs with the local LLM; the real
SQuAD questions of the same paragraphs are a second test set. Every strategy runs on both (ordinary,
resumable ``ragkit.eval.runs`` folders under ``bench/.cache/eval_agreement/``, one LLM cache), and:

* **retrieval**: the strategies ranked by MRR on the generated set and on the real questions — Kendall's
  tau-b between the two rankings (``scipy.stats.kendalltau``);
* **answers**: ranked by the share of answers right — F1 ≥ 0.5 against the gold answers on the real
  questions, against the generated answer (an unanswerable item: a decline) on the generated set — tau-b;
* **the judge**: ROC AUC of the local judge's faithfulness for the real questions' answers against
  whether they were right by the gold answers (the judge runs on the ``plain`` strategy's answers).

Nothing here is tuned: the thresholds of generation (``ragkit.eval.generate``) were set before this
script ran, and no choice is made from its figures.

    .venv/bin/python bench/eval_agreement.py --set squad_dev --paragraphs 300 --generated 120 --real 120
    .venv/bin/python bench/eval_agreement.py --set new_wiki --paragraphs 300 --generated 120 --real 120
    -> bench/results/eval_agreement.json (sets merged), the test sets in bench/results/eval_agreement/
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from scipy.stats import kendalltau
from squad_common import CACHE, ROOT, run_facts
from tqdm import tqdm

from ragkit.config import ModelConfig, RagConfig
from ragkit.eval.calibration import roc_auc
from ragkit.eval.experiment_sets import index_documents, load_squad_corpus
from ragkit.eval.generate import generate_testset
from ragkit.eval.judge import LocalJudge
from ragkit.eval.runs import EvalRun
from ragkit.eval.strategies import resolve
from ragkit.eval.testset import SQUAD_FILES, load_testset, save_testset, squad_testset
from ragkit.llm.cache import LLMCache, llm_cache
from ragkit.llm.generators import build_chat_generator
from ragkit.pipeline.engine import AgenticRAG

OUT = ROOT / "bench" / "results" / "eval_agreement.json"
SETS_DIR = ROOT / "bench" / "results" / "eval_agreement"
STRATEGIES = ["plain", "hyde", "rerank", "grading", "self_correction", "decompose", "full", "dense_only", "sparse_only"]
SEED = 29


def tau(scores_a: dict[str, float], scores_b: dict[str, float]) -> float:
    names = sorted(scores_a)
    value = kendalltau([scores_a[n] for n in names], [scores_b[n] for n in names]).statistic
    return round(float(value), 4) if value == value else 0.0  # all tied on one side: no agreement to speak of


def mean(summary: dict, measure: str) -> float:
    return (summary["aggregates"].get(measure) or {}).get("mean") or 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=sorted(SQUAD_FILES), required=True)
    parser.add_argument("--paragraphs", type=int, default=300)
    parser.add_argument("--generated", type=int, default=120, help="generated items to ask for")
    parser.add_argument("--real", type=int, default=120, help="real SQuAD questions of the same paragraphs")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--judge-model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    args = parser.parse_args()
    started = time.perf_counter()
    strategies = [resolve(name) for name in args.strategies.split(",")]

    docs, _ = load_squad_corpus(ROOT / "data" / "squad" / SQUAD_FILES[args.set])
    chosen = sorted(random.Random(SEED).sample([d.id for d in docs], args.paragraphs))
    index = index_documents([d for d in docs if d.id in set(chosen)], CACHE / f"agreement_{args.set}_{args.paragraphs}")
    config = RagConfig(models=ModelConfig(llm=args.model))
    llm = build_chat_generator(config.models)
    llm.warm_up()
    cache = LLMCache(CACHE / "eval_agreement" / "llm_cache.sqlite")

    SETS_DIR.mkdir(parents=True, exist_ok=True)
    generated_path = SETS_DIR / f"{args.set}.generated.jsonl"
    if not generated_path.exists():
        with llm_cache(cache):
            items, report = generate_testset(index, llm, n=args.generated, seed=SEED, progress=None)
        save_testset(items, generated_path)
        (SETS_DIR / f"{args.set}.generated.report.json").write_text(json.dumps(report.summary(), indent=1) + "\n")
    generation = json.loads((SETS_DIR / f"{args.set}.generated.report.json").read_text())
    real_path = SETS_DIR / f"{args.set}.real.jsonl"
    if not real_path.exists():
        save_testset(squad_testset(args.set, paragraph_ids=set(chosen), n=args.real, seed=SEED), real_path)

    judge_llm = build_chat_generator(ModelConfig(llm=args.judge_model))
    judge = LocalJudge(judge_llm)
    judge.model_name = args.judge_model
    results: dict[str, dict[str, dict]] = {"generated": {}, "real": {}}
    for which, path in (("generated", generated_path), ("real", real_path)):
        items, _ = load_testset(path)
        for strategy in tqdm(strategies, desc=f"{args.set} {which}", file=sys.stderr):
            judged = which == "real" and strategy.name == "plain"
            run = EvalRun.open(CACHE / "eval_agreement" / args.set / f"{which}-{strategy.label}", strategy, config, path, items,
                               known_chunks=set(index.chunks), judge_model=args.judge_model if judged else None, chat_generator=llm)
            rag = AgenticRAG(strategy.features, config=config, index=index, chat_generator=llm)
            results[which][strategy.label] = run.execute(rag, judge=judge if judged else None, cache=cache)
            results[which][strategy.label]["rows"] = run.rows()

    names = [s.label for s in strategies]
    ranking = {which: {"mrr": {n: mean(results[which][n], "mrr") for n in names}, "correct": {n: mean(results[which][n], "correct") for n in names}}
               for which in results}
    plain_rows = results["real"]["plain"]["rows"]
    judged = [(r["faithfulness"], bool(r["correct"])) for r in plain_rows if r.get("faithfulness") is not None and r.get("correct") is not None]
    entry = {
        "strategies": names, "model": args.model, "judge_model": args.judge_model,
        "kendall_tau": {"retrieval": tau(ranking["generated"]["mrr"], ranking["real"]["mrr"]),
                        "answer": tau(ranking["generated"]["correct"], ranking["real"]["correct"])},
        "judge_auc": round(roc_auc([p for p, _ in judged], [y for _, y in judged]), 4) if judged else None,
        "judge_n": len(judged),
        "generated": {"requested": generation["requested"], "accepted": generation["accepted"], "by_kind": generation["by_kind"],
                      "rejected_by_reason": generation["rejected_by_reason"], "llm_calls": generation["llm_calls"]},
        "per_strategy": {which: {n: {"mrr": round(ranking[which]["mrr"][n], 4), "correct": round(ranking[which]["correct"][n], 4),
                                     "p50_s": results[which][n]["aggregates"].get("latency_s", {}).get("p50"), "n": results[which][n]["aggregates"]["rows"]}
                                 for n in names} for which in results},
        "paragraphs": args.paragraphs, "seed": SEED, "real_questions": len(load_testset(real_path)[0]),
        "command": "python bench/eval_agreement.py " + " ".join(sys.argv[1:]), "seconds": round(time.perf_counter() - started, 1),
    }
    data = json.loads(OUT.read_text()) if OUT.exists() else {"sets": {}}
    data["sets"][args.set] = entry
    data["run"] = run_facts()
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: v for k, v in entry.items() if k != "per_strategy"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
