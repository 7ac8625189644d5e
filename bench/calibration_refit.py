"""``ragkit calibrate``'s recalibration, measured: the generated-question offset, and the held-out check.

Each sub-command writes its section of ``bench/results/calibration.json`` (``refit_offset``, ``refit``,
``refit_split<N>``, ``refit_pooled``; ``bench/calibration.py`` keeps them when it rewrites the file) and its
rows under ``bench/results/calibration_rows/``, so every figure can be recomputed without asking the LLM
again (``--from-rows``):

``offset``  On **SQuAD v1.1 dev** (not the set any figure below is scored on): questions generated from SQuAD dev
            paragraphs (single + paraphrase) and the real SQuAD questions of the *same* paragraphs are both
            answered by plain RAG over all 2,067 paragraphs; the confidence is recalibrated on the generated ones,
            and the logit shift that makes that fit best calibrated on the real ones is the model's offset →
            ``ragkit/data/generated_question_offset.json`` (what ``ragkit calibrate`` applies), with its 95 %
            bootstrap interval over paragraphs (``ragkit.eval.refit.offset_interval``). Draw 1 is
            ``bench/eval_agreement.py``'s 300 paragraphs (its generated set and 120 real questions); ``--draw 2``
            adds 300 other paragraphs, their own generated set and real questions (made once under
            ``bench/results/calibration_sets/``), because one draw pinned the offset down only so far. The offset
            is measured on every committed draw pooled; ``by_draw`` keeps each draw's own.
``refit``   On **new_wiki**: the user's path — questions generated from new_wiki paragraphs (``--generated``
            new ones, or with ``--from-agreement`` the single + paraphrase items bench/eval_agreement.py
            generated there with the same settings as the SQuAD dev set above), recalibrated as ``ragkit
            calibrate`` does — scored on gold new_wiki questions of *other* paragraphs (none the shipped fit
            was fitted on): the shipped fit, recalibrated without the offset, recalibrated with it.

    .venv/bin/python bench/calibration_refit.py offset --model qwen2.5-coder-0.5b            # draw 1
    .venv/bin/python bench/calibration_refit.py offset --model qwen2.5-coder-0.5b --draw 2   # + draw 2, pooled
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


OFFSET_SETS = ROOT / "bench" / "results" / "calibration_sets"
GENERATOR_MODEL = "qwen2.5-coder-0.5b"  # the model bench/eval_agreement.py generated draw 1 with
OFFSET_DRAW_SEED = 33


def offset_rows_name(side: str, draw: int) -> str:
    return f"offset_{side}_squad_dev" + ("" if draw == 1 else f".draw{draw}")


def offset_draws(model: str) -> list[int]:
    """The draws whose rows are committed for ``model`` (draw 1 always first)."""
    return [d for d in range(1, 10) if rows_file(offset_rows_name("real", d), model).exists()]


def offset_draw_items(draw: int, paragraphs: int, generated: int, real: int, index, model: str, generator) -> tuple[list, list]:
    """Draw 1: bench/eval_agreement.py's generated set (single + paraphrase) and its 120 real questions. Draw 2, …:
    ``paragraphs`` other SQuAD dev paragraphs (none of an earlier draw's), ``generated`` new questions from them
    (single 0.6 / paraphrase 0.4, by the draw-1 generator model) and ``real`` of their real questions — made once,
    kept under bench/results/calibration_sets/ so the other model answers the same items."""
    from ragkit.eval.generate import generate_testset
    from ragkit.eval.testset import save_testset, squad_testset
    from ragkit.llm.cache import LLMCache, llm_cache

    if draw == 1:
        return ([it for it in load_testset(AGREEMENT_SETS / "squad_dev.generated.jsonl")[0] if it.kind in ("single", "paraphrase")],
                load_testset(AGREEMENT_SETS / "squad_dev.real.jsonl")[0])
    generated_path, real_path = OFFSET_SETS / f"squad_dev.offset_draw{draw}.generated.jsonl", OFFSET_SETS / f"squad_dev.offset_draw{draw}.real.jsonl"
    if not generated_path.exists():
        from eval_agreement import sampled_paragraphs

        taken = set(sampled_paragraphs("squad_dev", 300)[1])  # draw 1's paragraphs
        for earlier in range(2, draw):
            taken |= set(json.loads((OFFSET_SETS / f"squad_dev.offset_draw{earlier}.paragraphs.json").read_text()))
        chosen = sorted(random.Random(OFFSET_DRAW_SEED + draw).sample(sorted(set(index.chunks) - taken), paragraphs))
        if model != GENERATOR_MODEL:
            from ragkit.llm.generators import build_chat_generator

            generator = build_chat_generator(ModelConfig(llm=GENERATOR_MODEL))
            generator.warm_up()
        started = time.time()
        with llm_cache(LLMCache(CACHE / "calibration_refit" / "llm_cache.sqlite")):
            items, report = generate_testset(index, generator, n=generated, mix={"single": 0.6, "paraphrase": 0.4}, seed=OFFSET_DRAW_SEED + draw,
                                             chunk_ids=chosen)
        OFFSET_SETS.mkdir(parents=True, exist_ok=True)
        (OFFSET_SETS / f"squad_dev.offset_draw{draw}.paragraphs.json").write_text(json.dumps(chosen) + "\n")
        (OFFSET_SETS / f"squad_dev.offset_draw{draw}.generated.report.json").write_text(
            json.dumps({**report.summary(), "generator_model": GENERATOR_MODEL, "seconds": round(time.time() - started)}, indent=1) + "\n")
        save_testset(items, generated_path)
        save_testset(squad_testset("squad_dev", paragraph_ids=set(chosen), n=real, seed=OFFSET_DRAW_SEED + draw), real_path)
    return load_testset(generated_path)[0], load_testset(real_path)[0]


def measure_offset(model: str, from_rows: bool, draw: int = 1, paragraphs: int = 300, generated: int = 120, real: int = 120) -> dict:
    """Collect ``draw``'s rows (unless ``from_rows``), then measure the offset on every committed draw pooled."""
    if not from_rows:
        rag, index, generator, _ = engine("squad_dev", model)
        generated_items, real_items = offset_draw_items(draw, paragraphs, generated, real, index, model, generator)
        write_rows(offset_rows_name("generated", draw), model, collect_rows(rag, generated_items))
        write_rows(offset_rows_name("real", draw), model, collect_rows(rag, real_items))
    draws = offset_draws(model)
    # the command that answered each draw: kept from the last time, this one for the draw just answered
    previous = ((json.loads(OUT.read_text()) if OUT.exists() else {}).get("refit_offset") or {}).get(model, {}).get("by_draw", {})
    commands = {d: previous.get(str(d), {}).get("command") or f"python bench/calibration_refit.py offset --model {model}" + (f" --draw {d}" if d > 1 else "")
                for d in draws}
    if not from_rows:
        commands[draw] = "python bench/calibration_refit.py " + " ".join(sys.argv[1:])
    by_draw = {d: (read_rows(rows_file(offset_rows_name("generated", d), model)), read_rows(rows_file(offset_rows_name("real", d), model))) for d in draws}
    generated_rows = [r for d in draws for r in by_draw[d][0]]
    real_rows = [r for d in draws for r in by_draw[d][1]]
    fitted = refit(generated_rows, model, agentic=False, offset=0.0)
    fit = fitted["unshifted_fit"]
    delta = difficulty_offset(fit, real_rows)
    shifted = {**fit, "intercept": fit["intercept"] + delta}
    interval = offset_interval(generated_rows, real_rows, model)
    share = lambda rows: round(sum(bool(r["correct"]) for r in rows) / max(len(rows), 1), 4)  # noqa: E731
    paragraphs_of = lambda rows: len({r["group"] for r in rows})  # noqa: E731
    entry = {
        "model": model, "logit_offset": round(delta, 4), "definition": DEFINITION, "logit_offset_bootstrap": interval,
        "generated": {"what": f"{len(generated_rows)} generated questions (single + paraphrase) of {paragraphs_of(generated_rows)} SQuAD dev paragraphs"
                              + (f" in {len(draws)} draws" if len(draws) > 1 else ""), "n": len(generated_rows), "right": share(generated_rows)},
        "real": {"what": f"{len(real_rows)} real SQuAD dev questions of the same paragraphs", "n": len(real_rows), "right": share(real_rows),
                 "refit_without_offset": {k: v for k, v in on(real_rows, with_fit(model, fit)).items() if k != "pairs"},
                 "refit_with_offset_in_sample": {k: v for k, v in on(real_rows, with_fit(model, shifted)).items() if k != "pairs"}},
        # each draw alone: whether a second sample agrees with the first
        "by_draw": {str(d): {"generated": len(g), "real": len(r), "right_generated": share(g), "right_real": share(r),
                             "logit_offset": round(difficulty_offset(refit(g, model, agentic=False, offset=0.0)["unshifted_fit"], r), 4),
                             "paragraphs": paragraphs_of(g + r), "command": commands[d]}
                    for d, (g, r) in by_draw.items()},
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
    o.add_argument("--draw", type=int, default=1, help="2, 3, …: answer another draw of SQuAD dev paragraphs' generated and real questions")
    o.add_argument("--paragraphs", type=int, default=300, help="a new draw's paragraphs")
    o.add_argument("--generated", type=int, default=120, help="a new draw's generated questions to ask for")
    o.add_argument("--real", type=int, default=120, help="a new draw's real questions")
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
        entry = measure_offset(args.model, args.from_rows, args.draw, args.paragraphs, args.generated, args.real)
        print(json.dumps({"logit_offset": entry["logit_offset"], "interval95": [entry["logit_offset_bootstrap"][k] for k in ("low", "high")],
                          "by_draw": entry["by_draw"], "generated": entry["generated"], "real": {k: v for k, v in entry["real"].items() if k == "right"}}, indent=1))
    else:
        entry = pooled_check(args.model) if args.command == "pooled" else held_out_check(
            args.model, args.generated, args.scored, args.seed, args.from_rows, args.from_agreement, args.split)
        s = entry["scored_on"]
        print(json.dumps({"n": s["n"], "right": s["right"], **{k: {m: s[k][m] for m in ("ece", "auc", "mean_confidence")} for k in ("before", "after_without_offset", "after")}}, indent=1))
    print(f"{args.command}: {time.time() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
