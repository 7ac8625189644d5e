"""``ragkit calibrate``'s recalibration, measured: the generated-question offset, and the held-out check.

Each sub-command writes its section of ``bench/results/calibration.json`` (``refit_offset``, ``refit``,
``refit_split<N>``, ``refit_pooled``; ``bench/calibration.py`` keeps them when it rewrites the file) and its
rows under ``bench/results/calibration_rows/``, so every figure can be recomputed without asking the LLM
again (``--from-rows``):

``offset``  On **SQuAD v1.1 dev** (not the set any figure below is scored on): the questions that
            ``bench/eval_agreement.py`` generated from 300 dev paragraphs (single + paraphrase) and the
            real SQuAD questions of the *same* paragraphs are both answered by plain RAG over all 2,067
            paragraphs; the confidence is recalibrated on the generated ones, and the logit shift that makes
            that fit best calibrated on the real ones is the model's offset →
            ``ragkit/data/generated_question_offset.json`` (what ``ragkit calibrate`` applies), with its 95 %
            bootstrap interval over paragraphs (``ragkit.eval.refit.offset_interval``: 78 + 120 questions pin
            it down only so far).
``refit``   On **new_wiki**: the user's path — questions generated from new_wiki paragraphs (``--generated``
            new ones, or with ``--from-agreement`` the single + paraphrase items bench/eval_agreement.py
            generated there with the same settings as the SQuAD dev set above), recalibrated as ``ragkit
            calibrate`` does — scored on gold new_wiki questions of *other* paragraphs (none the shipped fit
            was fitted on): the shipped fit, recalibrated without the offset, recalibrated with it.

    .venv/bin/python bench/calibration_refit.py offset --model qwen2.5-coder-0.5b
    .venv/bin/python bench/calibration_refit.py refit --model qwen2.5-coder-0.5b --from-agreement --scored 80
    .venv/bin/python bench/calibration_refit.py refit --model qwen2.5-coder-0.5b --scored 80 --split 2

``--split 2`` scores the same fit on 80 other gold questions: the recalibration (slope and shift on the
shipped logit, ``ragkit.eval.refit``) was chosen after split 1's figures were seen, so split 2 is the
figure no choice was made on. ``pooled`` scores every committed split together, from the rows:

    .venv/bin/python bench/calibration_refit.py pooled --model qwen2.5-coder-0.5b
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from squad_common import CACHE, ROOT, run_facts

from ragkit.config import ModelConfig, RagConfig
from ragkit.eval.calibration import DEFINITION, model_calibration, read_rows, reliability_bins, rescore_row, score
from ragkit.eval.experiments import index_documents, load_squad_corpus
from ragkit.eval.refit import OFFSET_FILE, collect_rows, difficulty_offset, offset_interval, refit
from ragkit.eval.testset import EvalItem, load_testset
from ragkit.pipeline.features import Features

SETS = {"new_wiki": ROOT / "data" / "squad" / "new_wiki_v1.0.json.gz", "squad_dev": ROOT / "data" / "squad" / "squaddev_v1.1.json.gz"}
AGREEMENT_SETS = ROOT / "bench" / "results" / "eval_agreement"
ROWS = ROOT / "bench" / "results" / "calibration_rows"
OUT = ROOT / "bench" / "results" / "calibration.json"


def engine(set_name: str, model: str):
    from ragkit.llm.generators import build_chat_generator
    from ragkit.pipeline.engine import AgenticRAG

    docs, questions = load_squad_corpus(SETS[set_name])
    index = index_documents(docs, CACHE / f"{set_name}_index_all-MiniLM-L6-v2")
    generator = build_chat_generator(ModelConfig(llm=model))
    generator.warm_up()
    rag = AgenticRAG(Features(), config=RagConfig(models=ModelConfig(llm=model)), chat_generator=generator, index=index)
    rag.ask("Warm-up question: what is the capital of France?")
    return rag, index, generator, questions


def rows_file(name: str, model: str) -> Path:
    return ROWS / f"{name}.{model}.jsonl"


def write_rows(name: str, model: str, rows: list[dict]) -> None:
    ROWS.mkdir(parents=True, exist_ok=True)
    rows_file(name, model).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def on(rows: list[dict], models: dict) -> dict:
    """ECE, AUC, … of ``models``' confidence on ``rows`` as the pipeline would show it, with the pairs for a diagram."""
    pairs = [rescore_row(r, models) for r in rows]
    confidences, right = [c for c, _ in pairs], [y for _, y in pairs]
    return {**score(confidences, right), "bins": reliability_bins(confidences, right), "pairs": [[round(c, 4), y] for c, y in pairs]}


def with_fit(model: str, fit: dict) -> dict:
    shipped = model_calibration(model)[1] or {}
    return {**shipped, "answer": {**(shipped.get("answer") or {}), "base": fit}}


def save_section(key: str, model: str, entry: dict) -> None:
    """``entry`` as ``calibration.json[key][model]``; the command that collected its rows stays its command, a
    ``--from-rows`` recomputation is kept beside it as ``{key}_recomputed``."""
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data.setdefault(key, {})[model] = entry
    command = "python bench/calibration_refit.py " + " ".join(sys.argv[1:])
    if "--from-rows" in sys.argv and model in data.get(f"{key}_commands", {}):
        data.setdefault(f"{key}_recomputed", {})[model] = command
    else:
        data.setdefault(f"{key}_commands", {})[model] = command
        data.setdefault(f"{key}_run", {})[model] = run_facts()
    OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def measure_offset(model: str, from_rows: bool) -> dict:
    if from_rows:
        generated_rows, real_rows = read_rows(rows_file("offset_generated_squad_dev", model)), read_rows(rows_file("offset_real_squad_dev", model))
    else:
        generated_items = [it for it in load_testset(AGREEMENT_SETS / "squad_dev.generated.jsonl")[0] if it.kind in ("single", "paraphrase")]
        real_items = load_testset(AGREEMENT_SETS / "squad_dev.real.jsonl")[0]
        rag = engine("squad_dev", model)[0]
        generated_rows, real_rows = collect_rows(rag, generated_items), collect_rows(rag, real_items)
        write_rows("offset_generated_squad_dev", model, generated_rows)
        write_rows("offset_real_squad_dev", model, real_rows)
    fitted = refit(generated_rows, model, agentic=False, offset=0.0)
    fit = fitted["unshifted_fit"]
    delta = difficulty_offset(fit, real_rows)
    shifted = {**fit, "intercept": fit["intercept"] + delta}
    interval = offset_interval(generated_rows, real_rows, model)
    share = lambda rows: round(sum(bool(r["correct"]) for r in rows) / max(len(rows), 1), 4)  # noqa: E731
    entry = {
        "model": model, "logit_offset": round(delta, 4), "definition": DEFINITION, "logit_offset_bootstrap": interval,
        "generated": {"what": f"{len(generated_rows)} generated questions (single + paraphrase) of bench/eval_agreement.py's 300 SQuAD dev paragraphs",
                      "n": len(generated_rows), "right": share(generated_rows)},
        "real": {"what": f"{len(real_rows)} real SQuAD dev questions of the same paragraphs", "n": len(real_rows), "right": share(real_rows),
                 "refit_without_offset": {k: v for k, v in on(real_rows, with_fit(model, fit)).items() if k != "pairs"},
                 "refit_with_offset_in_sample": {k: v for k, v in on(real_rows, with_fit(model, shifted)).items() if k != "pairs"}},
    }
    data = json.loads(OFFSET_FILE.read_text()) if OFFSET_FILE.exists() else {
        "definition": "logit added to a confidence fit learned on generated questions so that it is calibrated on people's questions "
                      "(ragkit.eval.refit; measured by bench/calibration_refit.py offset on SQuAD v1.1 dev)", "models": {}}
    data["models"][model] = {"logit_offset": entry["logit_offset"], "logit_offset_interval95": [interval["low"], interval["high"]],
                             "generated": entry["generated"]["n"], "real": entry["real"]["n"],
                             "right_generated": entry["generated"]["right"], "right_real": entry["real"]["right"], "measured_on": "SQuAD v1.1 dev"}
    OFFSET_FILE.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    save_section("refit_offset", model, entry)
    return entry


def gold_rows_name(split: int) -> str:
    return "refit_gold_new_wiki" if split == 1 else f"refit_gold_new_wiki.split{split}"


def sample_gold(questions: list[dict], model: str, used_paragraphs: set, excluded_ids: set, n: int, seed: int) -> list[EvalItem]:
    """``n`` gold new_wiki questions of paragraphs the fit's items do not come from, none the shipped fit was fitted on."""
    shipped_ids = {r["id"] for r in read_rows(ROWS / f"new_wiki.{model}.jsonl")}
    pool = [q for q in questions if q["doc_id"] not in used_paragraphs and q["id"] not in shipped_ids | excluded_ids]
    return [EvalItem(q["question"], q["answers"], kind="squad", chunks=[q["doc_id"]], id=q["id"]) for q in random.Random(seed).sample(pool, n)]


def scored_on_gold(fit_rows: list[dict], gold_rows: list[dict], model: str, what: str) -> tuple[dict, dict]:
    """(``ragkit calibrate``'s outcome on ``fit_rows``, the shipped / recalibrated / + offset figures on ``gold_rows``)."""
    outcome = refit(fit_rows, model, agentic=False)
    scored = {"what": what, "n": len(gold_rows), "right": round(sum(bool(r["correct"]) for r in gold_rows) / max(len(gold_rows), 1), 4),
              "before": on(gold_rows, model_calibration(model)[1]), "after_without_offset": on(gold_rows, with_fit(model, outcome["unshifted_fit"])),
              "after": on(gold_rows, outcome["calibration"]["models"][model])}
    return outcome, scored


def held_out_check(model: str, generated: int, scored: int, seed: int, from_rows: bool, from_agreement: bool = False, split: int = 1) -> dict:
    from ragkit.eval.generate import generate_testset
    from ragkit.llm.cache import LLMCache, llm_cache

    generation_s = None
    if from_rows:
        fit_rows, gold_rows = read_rows(rows_file("refit_generated_new_wiki", model)), read_rows(rows_file(gold_rows_name(split), model))
        used = {r["group"] for r in fit_rows}
    elif split > 1:
        # another sample of gold questions, disjoint from the earlier splits', scored against the same fit rows
        fit_rows = read_rows(rows_file("refit_generated_new_wiki", model))
        if not fit_rows:
            raise SystemExit(f"split {split} scores the fit of split 1: run `refit --from-agreement` (split 1) first")
        rag, index, generator, questions = engine("new_wiki", model)
        used = {r["group"] for r in fit_rows}
        earlier = {r["id"] for k in range(1, split) for r in read_rows(rows_file(gold_rows_name(k), model))}
        gold_rows = collect_rows(rag, sample_gold(questions, model, used, earlier, scored, seed + split))
        write_rows(gold_rows_name(split), model, gold_rows)
    else:
        rag, index, generator, questions = engine("new_wiki", model)
        if from_agreement:
            # the generator's own output on new_wiki, made once by bench/eval_agreement.py (the same settings as the
            # SQuAD dev set the offset was measured on): its single + paraphrase items, no new generation
            items = [it for it in load_testset(AGREEMENT_SETS / "new_wiki.generated.jsonl")[0] if it.kind in ("single", "paraphrase")]
        else:
            started = time.time()
            with llm_cache(LLMCache(CACHE / "calibration_refit" / "llm_cache.sqlite")):
                items, _ = generate_testset(index, generator, n=generated, mix={"single": 0.6, "paraphrase": 0.4}, seed=seed)
            generation_s = round(time.time() - started)
        fit_rows = collect_rows(rag, items)
        used = {c for it in items for c in it.chunks}
        gold_rows = collect_rows(rag, sample_gold(questions, model, used, set(), scored, seed + 1))
        write_rows("refit_generated_new_wiki", model, fit_rows)
        write_rows("refit_gold_new_wiki", model, gold_rows)
    what = f"{len(gold_rows)} gold new_wiki questions of other paragraphs, none the shipped fit saw" + (
        f" (split {split}: none of split{'s 1–' if split > 2 else ' '}{split - 1}'s)" if split > 1 else "")
    outcome, scored_on = scored_on_gold(fit_rows, gold_rows, model, what)
    entry = {
        "model": model, "features": "Features() (plain)", "definition": DEFINITION, "offset": outcome["offset"],
        "fit_on": {"what": f"{len(fit_rows)} generated questions (single + paraphrase) from {len(used)} new_wiki paragraphs", "answered": outcome["answered"],
                   "right": outcome["right"], "generation_s": generation_s,
                   "out_of_fold": {"before": outcome["before"], "after": outcome["after"], "after_without_offset": outcome["after_without_offset"]}},
        "scored_on": scored_on,
    }
    save_section("refit" if split == 1 else f"refit_split{split}", model, entry)
    return entry


def pooled_check(model: str) -> dict:
    """Every committed gold split scored together (no LLM call): ECE on 80 questions carries a noise of several
    hundredths, so the splits pooled are the steadier figure → ``calibration.json["refit_pooled"]``."""
    fit_rows = read_rows(rows_file("refit_generated_new_wiki", model))
    splits = [k for k in range(1, 20) if rows_file(gold_rows_name(k), model).exists()]
    gold_rows = [r for k in splits for r in read_rows(rows_file(gold_rows_name(k), model))]
    if not fit_rows or not gold_rows:
        raise SystemExit(f"no committed rows for {model}: run `refit --from-agreement` first")
    outcome, scored_on = scored_on_gold(fit_rows, gold_rows, model,
                                        f"{len(gold_rows)} gold new_wiki questions of other paragraphs (splits {', '.join(map(str, splits))} pooled)")
    entry = {
        "model": model, "features": "Features() (plain)", "definition": DEFINITION, "offset": outcome["offset"], "platt": outcome["platt"],
        "fit_on": {"what": f"{len(fit_rows)} generated questions (single + paraphrase) from {len({r['group'] for r in fit_rows})} new_wiki paragraphs",
                   "right": outcome["right"]},
        "scored_on": scored_on,
    }
    save_section("refit_pooled", model, entry)
    return entry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    o = sub.add_parser("offset", help="the generated-question offset, on SQuAD dev")
    o.add_argument("--model", default="qwen2.5-coder-0.5b")
    o.add_argument("--from-rows", action="store_true", help="recompute from the committed rows, no LLM call")
    r = sub.add_parser("refit", help="the held-out check on new_wiki: shipped fit, refit without and with the offset")
    r.add_argument("--model", default="qwen2.5-coder-0.5b")
    r.add_argument("--generated", type=int, default=60)
    r.add_argument("--scored", type=int, default=80)
    r.add_argument("--seed", type=int, default=11)
    r.add_argument("--from-rows", action="store_true", help="recompute from the committed rows, no LLM call")
    r.add_argument("--split", type=int, default=1,
                   help="2, 3, …: score split 1's fit on another --scored gold questions, none of the earlier splits' (section refit_split<N>)")
    r.add_argument("--from-agreement", action="store_true",
                   help="fit on bench/eval_agreement.py's generated new_wiki set (single + paraphrase) instead of generating --generated new ones")
    p = sub.add_parser("pooled", help="every committed gold split scored together, from the rows (no LLM)")
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    args = parser.parse_args()
    started = time.time()
    if args.command == "offset":
        entry = measure_offset(args.model, args.from_rows)
        print(json.dumps({"logit_offset": entry["logit_offset"], "generated": entry["generated"], "real": {k: v for k, v in entry["real"].items() if k == "right"}}, indent=1))
    else:
        entry = pooled_check(args.model) if args.command == "pooled" else held_out_check(
            args.model, args.generated, args.scored, args.seed, args.from_rows, args.from_agreement, args.split)
        s = entry["scored_on"]
        print(json.dumps({"n": s["n"], "right": s["right"], **{k: {m: s[k][m] for m in ("ece", "auc", "mean_confidence")} for k in ("before", "after_without_offset", "after")}}, indent=1))
    print(f"{args.command}: {time.time() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
