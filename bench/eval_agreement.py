"""Does a generated test set rank strategies the way real questions do? (issue 29's acceptance figure)

For a SQuAD set (``squad_dev``, ``new_wiki``, or any file in SQuAD v1.1's format — a held-out set is checked
the same way, its figures filed under its file name): every paragraph of the set is indexed (one chunk each —
a user's folder holds far more chunks than any test set asks about, and with only the sampled
paragraphs indexed every retriever finds nearly everything, so the strategies differ by noise);
``ragkit.eval.generate`` writes a test set from a seeded sample of those paragraphs with the local LLM;
the real SQuAD questions of the same paragraphs are a second test set. Every strategy runs on both (ordinary,
resumable ``ragkit.eval.runs`` folders under ``bench/.cache/eval_agreement/``, one LLM cache), and:

* **retrieval**: the strategies ranked by MRR on the generated set and on the real questions — Kendall's
  tau-b between the two rankings (``scipy.stats.kendalltau``);
* **answers**: ranked by the share of answers right — F1 ≥ 0.5 against the gold answers on the real
  questions, against the generated answer on the generated set's answerable items — tau-b. SQuAD v1.1
  has no unanswerable question, so the like-for-like ranking leaves the generated unanswerable items
  out (decided before any run at this size); ``answer_with_unanswerable`` counts them (a decline is right);
* every tau has a paired bootstrap 95% interval (questions resampled, the same draw for every strategy);
* **each ranking's agreement with itself**: the set's questions split at random into two halves, tau-b
  between the halves' rankings (median and 5–95 % over 1,000 splits). A ranking that does not agree with
  itself is noise at that size, and bounds how well another set can agree with it;
* **the judge**: ROC AUC of the local judge's faithfulness for the real questions' answers against
  whether they were right by the gold answers (the judge runs on the ``plain`` strategy's answers).

Nothing here is tuned: the thresholds of generation (``ragkit.eval.generate``) were set before this
script ran, the judge's task was chosen on other paragraphs (``bench/judge_prompt_dev.py``), and no
choice is made from this script's figures.

    .venv/bin/python bench/eval_agreement.py --set squad_dev --paragraphs 300 --generated 120 --real 120
    .venv/bin/python bench/eval_agreement.py --set new_wiki --paragraphs 300 --generated 120 --real 120
    .venv/bin/python bench/eval_agreement.py --set squad_dev --rescore   # the figures again from the finished runs' rows
    .venv/bin/python bench/eval_agreement.py --set held_out.json.gz --paragraphs 300 --generated 120 --real 120   # -> sets["held_out"]
    -> bench/results/eval_agreement.json (sets merged), the test sets in bench/results/eval_agreement/

The generated set's writer is ``--writer-model``: by default the 1.5B, the model ``ragkit testset generate`` writes
with unless configured otherwise. The first committed sets (``{set}.generated.jsonl``, and every figure of a set's
entry without a ``writer_model``) were written by the 0.5B the strategies answer with, whose items a person found
valid far less often (``bench/writer_model.py``); a set another model writes is ``{set}.generated.{model}.jsonl``, its
figures the entry's ``by_writer`` section (beside the first, never over it), its strategies' runs in a folder of its
own while the real questions' runs are shared; the commands above run the committed figures again with
``--writer-model qwen2.5-coder-0.5b`` (their stored ``command`` predates the flag). ``--generate-only`` writes the set
and its report and stops:

    .venv/bin/python bench/eval_agreement.py --set new_wiki --paragraphs 300 --generated 120 --generate-only
    .venv/bin/python bench/eval_agreement.py --set new_wiki --paragraphs 300 --generated 120 --real 240 --writer-model qwen2.5-coder-1.5b

A generated set of another size than the committed 120 items (``--generated 240``) is its own file
(``{set}.generated{.model}.240.jsonl``) and its figures its writer's ``by_writer`` section under ``real{N}-generated240``,
beside the committed ones and never over them; its real questions' runs are the same shared folders.

``--question-context passage`` has the writer read each sentence's whole paragraph (``bench/writer_context.py``): its
set is filed as another writer's, ``{model}-passage`` (``ragkit.eval.agreement.writer_label``), beside the others.

``--real`` above 120 keeps the first runs' 120 real questions and adds a second seeded draw from the
paragraphs' other questions: the split-half τ of the real rankings at 120 says they are mostly noise at
that size. Such a run writes its real set to ``{set}.real{N}.jsonl`` and its figures to the set's
``larger_real`` section, beside the 120-question entry rather than over it; the judge does not read it
(on plain's answers it costs ~15 s a question, more than every strategy's answers together), so the
judge's AUC stays the 120-question run's:

    .venv/bin/python bench/eval_agreement.py --set new_wiki --paragraphs 300 --generated 120 --real 240
    .venv/bin/python bench/eval_agreement.py --set new_wiki --real 240 --rescore

``--judge-only`` with ``--real`` above 120 measures the judge alone on the larger real set: ``plain`` answers
it and the judge reads every answer, no other strategy runs. At ~120 questions the AUC's own 95% interval is
about ±0.09, wider than the distance of either set's figure from the 0.75 target, so this says where the
judge stands with twice the questions. Its figures (the AUC with a bootstrap interval, and the AUC over the
first 120 again, which should reproduce the stored one) go to the set's ``larger_judge`` section, beside
the 120-question ``judge_auc`` and never over it — decided before the run, whatever it shows:

    .venv/bin/python bench/eval_agreement.py --set squad_dev --real 240 --judge-only
    .venv/bin/python bench/eval_agreement.py --set squad_dev --real 240 --judge-only --rescore

A ``larger_judge`` measured since the prompt cache is reused in whole blocks (``prompt_reuse_block``) keeps
the one measured before it under ``before_aligned_reuse``. Beside the AUC, a diagnosis that is never the
target: the AUC when an answer that holds a gold answer inside a longer reply counts as right
(``right_if_it_holds_a_gold_answer``, with how many answers that relabels), since F1 >= 0.5 against a short
gold span counts such a sentence wrong while the judge, asked whether it is correct, says yes.
"""

from __future__ import annotations

import argparse
import json
import random
from statistics import mean
import sys
import time
from pathlib import Path

from squad_common import CACHE, ROOT, run_facts
from tqdm import tqdm

from ragkit.config import DEFAULT_LLM, ModelConfig, RagConfig
from ragkit.eval.agreement import agreement as shared_agreement, split_half, writer_label, writer_parts
from ragkit.eval.calibration import roc_auc
from ragkit.eval.experiment_sets import index_documents, load_squad_corpus
from ragkit.eval.generate import QUESTION_CONTEXTS, generate_testset
from ragkit.eval.judge import DEFAULT_TASK, FAITHFULNESS_TASKS, LocalJudge
from ragkit.eval.metrics import holds_gold_answer
from ragkit.eval.runs import EvalRun, load_run
from ragkit.eval.strategies import resolve
from ragkit.eval.testset import SQUAD_FILES, load_testset, save_testset, squad_file, squad_set_name, squad_testset
from ragkit.llm.aligned_reuse import DEFAULT_BLOCK
from ragkit.llm.cache import LLMCache, llm_cache
from ragkit.llm.generators import build_chat_generator
from ragkit.pipeline.engine import AgenticRAG

OUT = ROOT / "bench" / "results" / "eval_agreement.json"
SETS_DIR = ROOT / "bench" / "results" / "eval_agreement"
STRATEGIES = ["plain", "hyde", "rerank", "grading", "self_correction", "decompose", "full", "dense_only", "sparse_only"]
SEED = 29


BOOTSTRAP = 1000
FIRST_REAL_DRAW = 120  # the real set of the first committed runs; a larger --real keeps it and adds to it
FIRST_GENERATED = 120  # the generated items every committed set asked for; a set of another size is filed beside them
# The committed sets were written by the model the strategies answer with. `ragkit testset generate` writes with the
# pipeline's default LLM, the 1.5B, and a person's labels find its items valid far more often (bench/writer_model.py),
# so a set it writes is filed under its name, beside the first, never over it.
FIRST_WRITER = "qwen2.5-coder-0.5b"
# Every committed generated set as (writer, items), for the scripts that read their finished runs again.
COMMITTED_GENERATED_SETS = ((FIRST_WRITER, FIRST_GENERATED), ("qwen2.5-coder-1.5b", FIRST_GENERATED), ("qwen2.5-coder-1.5b", 240))


def entry_writer(entry: dict) -> str:
    """Who wrote a stored entry's generated set (no ``writer_model``: the first writer; no ``question_context``: sentences)."""
    return writer_label(entry.get("writer_model", FIRST_WRITER), entry.get("question_context", "sentence"))


def context_field(question_context: str) -> dict:
    """``question_context`` as an entry records it: only where the writer read more than the sentence, so every entry
    written before the choice existed reads as what it was."""
    return {} if question_context == "sentence" else {"question_context": question_context}


def writer_suffix(writer: str) -> str:
    return "" if writer == FIRST_WRITER else f".{writer}"


def run_folder(set_name: str, generated: int, real: int, writer: str, which: str, strategy: str) -> Path:
    """A strategy's run on one of the two sets: the real questions' runs are shared by every writer's set, of any size."""
    tail = "" if which == "real" or writer == FIRST_WRITER else f"-{writer}"
    return CACHE / "eval_agreement" / f"{set_name}-{FIRST_GENERATED if which == 'real' else generated}-{real}{tail}" / f"{which}-{strategy}"


def section_key(real: int, generated: int) -> str:
    """Where a ``by_writer`` figure is filed: by its real set's size, and its generated set's where that is not the first's."""
    return f"real{real}" + ("" if generated == FIRST_GENERATED else f"-generated{generated}")


def generated_suffix(generated: int) -> str:
    """A generated set of another size than the committed ones is its own file: it never replaces theirs."""
    return "" if generated == FIRST_GENERATED else f".{generated}"


def writer_section(data: dict, set_name: str, writer: str, real: int, generated: int = FIRST_GENERATED) -> dict | None:
    """The stored figures of ``writer``'s set of ``generated`` items against ``real`` real questions: the set's entry (or
    its ``larger_real``) when the first committed set is that one, else its ``by_writer`` section."""
    entry = data["sets"].get(set_name)
    if entry is None:
        return None
    if entry_writer(entry) == writer and entry["generated"]["requested"] == generated:
        return entry.get("larger_real") if real > FIRST_REAL_DRAW else entry
    return entry.get("by_writer", {}).get(writer, {}).get(section_key(real, generated))


def file_entry(data: dict, set_name: str, entry: dict) -> None:
    """Where a run's figures go: the set's entry (a larger real set's beside it, as ``larger_real``), or — for a set
    another model wrote from the same paragraphs, or one of another size — its ``by_writer`` section, under its real
    set's size (and its own, :func:`section_key`)."""
    first = data["sets"].get(set_name)
    writer, generated = entry_writer(entry), entry["generated"]["requested"]
    if first is not None and (entry_writer(first) != writer or first["generated"]["requested"] != generated):
        first.setdefault("by_writer", {}).setdefault(writer, {})[section_key(entry["real_questions"], generated)] = entry
    elif entry["real_questions"] > FIRST_REAL_DRAW:  # beside the 120-question entry, whose judge AUC it keeps
        before = first.get("larger_real")
        first["larger_real"] = {key: entry[key] for key in (
            "kendall_tau", "kendall_tau_interval95", "split_half_tau", "scored_items", "real_questions", "command", "seconds")} | {
            "per_strategy": {"real": entry["per_strategy"]["real"], "generated": entry["per_strategy"]["generated"]}}
        if before and before["real_questions"] == entry["real_questions"]:  # a rerun by later code: the first figures kept
            first["larger_real"]["earlier_code"] = before.get("earlier_code", before)
    else:
        data["sets"][set_name] = entry | ({"by_writer": first["by_writer"]} if first and "by_writer" in first else {})


def agreement(generated: dict[str, list[dict]], real: dict[str, list[dict]], measure: str, keep_generated) -> dict:
    """Kendall's tau-b between the strategies' means on the two sets, with a paired bootstrap 95% interval
    (:func:`ragkit.eval.agreement.agreement`, which ``ragkit agreement`` reads too), named for this script's two sets."""
    figures = shared_agreement(generated, real, measure, keep_generated, lambda r: True, seed=SEED, samples=BOOTSTRAP)
    return {"tau": figures["tau"], "interval95": figures["interval95"], "n_generated": figures["n_first"], "n_real": figures["n_second"],
            "generated": figures["first"], "real": figures["second"]}


def sampled_paragraphs(set_spec: str, paragraphs: int) -> tuple[list, list[str]]:
    """Every paragraph of the set (all are indexed) and the seeded sample the test sets are drawn from
    (``set_spec``: a shipped set's name or a SQuAD-format file, :func:`ragkit.eval.testset.squad_file`)."""
    docs, _ = load_squad_corpus(squad_file(set_spec))
    if paragraphs > len(docs):
        raise ValueError(f"--paragraphs {paragraphs}: {set_spec} has {len(docs)} paragraphs")
    return docs, sorted(random.Random(SEED).sample([d.id for d in docs], paragraphs))


def real_questions(set_spec: str, paragraph_ids: set[str], n: int) -> list:
    """The real SQuAD questions of the sampled paragraphs: the first runs' seeded draw of ``FIRST_REAL_DRAW``, then
    (for a larger ``n``) a second seeded draw from the rest. A larger set holds the smaller one, so its questions'
    answers come from the LLM cache and only the added questions cost LLM calls."""
    first = squad_testset(set_spec, paragraph_ids=paragraph_ids, n=min(n, FIRST_REAL_DRAW), seed=SEED)
    if n <= FIRST_REAL_DRAW:
        return first
    taken = {item.id for item in first}
    rest = [item for item in squad_testset(set_spec, paragraph_ids=paragraph_ids) if item.id not in taken]
    return first + random.Random(SEED + 1).sample(rest, min(n - FIRST_REAL_DRAW, len(rest)))


def judged_answers(rows: list[dict]) -> list[tuple[float, bool, str]]:
    """(the judge's faithfulness, right by the gold answers, question id) of every answer the judge scored."""
    return [(r["faithfulness"], bool(r["correct"]), r["id"]) for r in rows if r.get("faithfulness") is not None and r.get("correct") is not None]


def agreement_figures(rows: dict[str, dict[str, list[dict]]]) -> dict:
    """Every figure computed from the runs' rows: the taus with their intervals, each ranking's split-half tau, the judge's AUC."""
    answerable = lambda r: r["kind"] != "unanswerable"  # noqa: E731
    keeps = {"retrieval": ("mrr", answerable), "answer": ("correct", answerable), "answer_with_unanswerable": ("correct", lambda r: True)}
    agreements = {name: agreement(rows["generated"], rows["real"], measure, keep) for name, (measure, keep) in keeps.items()}
    judged = judged_answers(rows["real"]["plain"])
    return {
        "agreements": agreements,
        "kendall_tau": {name: a["tau"] for name, a in agreements.items()},
        "kendall_tau_interval95": {name: a["interval95"] for name, a in agreements.items()},
        "split_half_tau": {name: {"generated": split_half(rows["generated"], measure, keep, seed=SEED, splits=BOOTSTRAP),
                                 "real": split_half(rows["real"], measure, lambda r: True, seed=SEED, splits=BOOTSTRAP)}
                           for name, (measure, keep) in keeps.items() if name != "answer_with_unanswerable"},
        "judge_auc": round(roc_auc([p for p, _, _ in judged], [y for _, y, _ in judged]), 4) if judged else None,
        "judge_n": len(judged),
        "scored_items": {name: {"generated": a["n_generated"], "real": a["n_real"]} for name, a in agreements.items()},
    }


def judge_figures(rows: list[dict], first_draw: set[str]) -> dict:
    """The judge's AUC against gold correctness with a bootstrap 95% interval (questions resampled), and the
    same AUC over the first draw's questions alone (to set beside the stored 120-question figure)."""
    judged = judged_answers(rows)
    auc = lambda sample: roc_auc([p for p, _, _ in sample], [y for _, y, _ in sample])  # noqa: E731
    rng, draws = random.Random(SEED), []
    for _ in range(BOOTSTRAP):
        value = auc([judged[rng.randrange(len(judged))] for _ in judged])
        if value == value:  # a draw with one class only has no AUC
            draws.append(value)
    draws.sort()
    first = [j for j in judged if j[2] in first_draw]
    figures = {"judge_auc": round(auc(judged), 4), "judge_auc_interval95": [round(draws[int(0.025 * len(draws))], 4), round(draws[int(0.975 * len(draws)) - 1], 4)],
               "judge_n": len(judged), "declined_not_judged": sum(1 for r in rows if r.get("faithfulness") is None and r.get("declined")),
               "judge_failed": sum(1 for r in rows if r.get("faithfulness") is None and not r.get("declined")), "share_right_of_judged": round(mean(y for _, y, _ in judged), 4),
               "first_draw": {"judge_auc": round(auc(first), 4), "judge_n": len(first)}}
    by_id = {r["id"]: r for r in rows}
    if all(by_id[i].get("gold") for _, _, i in judged):
        # A diagnosis, never the target: how much of what the judge "gets wrong" is a right answer given as a
        # sentence, which F1 >= 0.5 against a short gold span counts wrong while the judge calls it right.
        holds = {i: holds_gold_answer(by_id[i]["answer"], by_id[i]["gold"]) for _, _, i in judged}
        figures["right_if_it_holds_a_gold_answer"] = {
            "judge_auc": round(roc_auc([p for p, _, _ in judged], [y or holds[i] for _, y, i in judged]), 4),
            "relabelled": sum(1 for _, y, i in judged if not y and holds[i]), "wrong_by_f1": sum(1 for _, y, _ in judged if not y)}
    return figures


def judged_folder(set_name: str, real: int, task: str = "correct"):
    """The judge-only run's folder; a task other than P(yes) of ``correct`` gets its own (a run never mixes two)."""
    return CACHE / "eval_agreement" / (f"{set_name}-judged-{real}" + ("" if task == "correct" else f"-{task}")) / "real-plain"


def rescore_judge(set_spec: str, real: int) -> int:
    """``larger_judge`` again from its run's rows (zero LLM calls)."""
    data, set_name = json.loads(OUT.read_text()), squad_set_name(set_spec)
    stored = data["sets"][set_name]["larger_judge"]
    _, chosen = sampled_paragraphs(set_spec, data["sets"][set_name]["paragraphs"])
    first = {item.id for item in real_questions(set_spec, set(chosen), FIRST_REAL_DRAW)}
    folder = judged_folder(set_name, real, stored.get("judge_task", "correct"))
    figures = judge_figures(load_run(folder)["rows"], first)
    changed = {k: (stored[k], v) for k, v in figures.items() if k in stored and stored[k] != v}
    if changed:
        raise SystemExit(f"the rows in {folder} do not give the stored figures: {changed}")
    added = {k: v for k, v in figures.items() if k not in stored}  # a figure added to the script after the run
    if added:
        stored.update(added)
        OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(figures, indent=1))
    return 0


def rescore(set_spec: str, real: int, writer: str = FIRST_WRITER, generated: int = FIRST_GENERATED) -> int:
    """The figures again from the finished runs' rows (zero LLM calls): for a figure added after the runs."""
    data, set_name = json.loads(OUT.read_text()), squad_set_name(set_spec)
    entry, stored = data["sets"][set_name], writer_section(data, set_name, writer, real, generated)
    if stored is None:
        raise SystemExit(f"no stored run of {set_name} with a set of {generated} written by {writer} and {real} real questions")
    first_writer = entry_writer(entry) == writer and entry["generated"]["requested"] == generated
    larger = real > FIRST_REAL_DRAW and first_writer  # the figures filed beside the first entry's (no judge AUC)
    entry = entry if first_writer else stored
    folder = run_folder(set_name, entry["generated"]["requested"], stored["real_questions"], writer, "generated", "").parent
    rows = {which: {n: load_run(run_folder(set_name, entry["generated"]["requested"], stored["real_questions"], writer, which, n))["rows"]
                    for n in entry["strategies"]} for which in ("generated", "real")}
    figures = agreement_figures(rows)
    checked = ("kendall_tau",) if larger else ("kendall_tau", "judge_auc")
    changed = {k: (stored[k], figures[k]) for k in checked if stored.get(k) != figures[k]}
    if changed:
        raise SystemExit(f"the rows in {folder} do not give the stored figures: {changed}")
    unstored = {"agreements", "judge_auc", "judge_n"} if larger else {"agreements"}  # the larger set is not judged
    stored.update({k: v for k, v in figures.items() if k not in unstored})
    model, context = writer_parts(writer)
    stored["rescore_command"] = (f"python bench/eval_agreement.py --set {set_spec}{f' --real {real}' if real != FIRST_REAL_DRAW else ''}"
                                 f"{'' if generated == FIRST_GENERATED else f' --generated {generated}'}"
                                 f"{'' if model == FIRST_WRITER else f' --writer-model {model}'}"
                                 f"{'' if context == 'sentence' else f' --question-context {context}'} --rescore")
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: stored.get(k) for k in ("kendall_tau", "split_half_tau", "judge_auc")}, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", required=True, help=f"{' or '.join(sorted(SQUAD_FILES))}, or a SQuAD v1.1-format .json/.json.gz file "
                                                      "(a held-out set; its figures are filed under its file name)")
    parser.add_argument("--paragraphs", type=int, default=300)
    parser.add_argument("--generated", type=int, default=120, help="generated items to ask for")
    parser.add_argument("--real", type=int, default=120, help="real SQuAD questions of the same paragraphs")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="the model every strategy answers with")
    parser.add_argument("--writer-model", help=f"the model that writes the generated set (default {DEFAULT_LLM}, as `ragkit testset generate`; "
                                               f"with --rescore, the set's first; the first committed sets: {FIRST_WRITER})")
    parser.add_argument("--question-context", choices=QUESTION_CONTEXTS, default="sentence",
                        help="what the writer reads for each question: its answer's sentence, or the sentence's whole passage (bench/writer_context.py)")
    parser.add_argument("--generate-only", action="store_true", help="write the generated set and its report, and stop")
    parser.add_argument("--judge-model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--judge-task", default=DEFAULT_TASK, choices=sorted(FAITHFULNESS_TASKS))
    parser.add_argument("--rescore", action="store_true", help="recompute the figures from the finished runs of --set (no LLM call)")
    parser.add_argument("--judge-only", action="store_true", help="only plain's answers to the --real questions (above 120), every one judged: the judge's AUC on a larger set")
    args = parser.parse_args()
    try:
        squad_file(args.set)
    except ValueError as exc:
        parser.error(str(exc))
    args.spec, args.set = args.set, squad_set_name(args.set)  # read from the spec; figures, runs and sets filed under the name
    if args.judge_only and args.real <= FIRST_REAL_DRAW:
        parser.error(f"--judge-only measures a larger real set than the first {FIRST_REAL_DRAW}, whose judge the full run already reads")
    if args.writer_model is None:
        stored = json.loads(OUT.read_text())["sets"].get(args.set, {}) if args.rescore and OUT.exists() else {}
        args.writer_model = stored.get("writer_model", FIRST_WRITER) if args.rescore else DEFAULT_LLM
    args.writer = writer_label(args.writer_model, args.question_context)  # what its set, runs and figures are filed under
    if args.rescore:
        return rescore_judge(args.spec, args.real) if args.judge_only else rescore(args.spec, args.real, args.writer, args.generated)
    started = time.perf_counter()
    strategies = [resolve(name) for name in args.strategies.split(",")]

    try:
        docs, chosen = sampled_paragraphs(args.spec, args.paragraphs)
    except ValueError as exc:
        parser.error(str(exc))
    index = index_documents(docs, CACHE / f"{args.set}_index_all-MiniLM-L6-v2")
    config = RagConfig(models=ModelConfig(llm=args.model))
    llm = build_chat_generator(config.models)
    llm.warm_up()
    loaded = {args.model: llm}  # one instance a model: the writer and the judge are both the 1.5B by default

    def generator(model: str):
        if model not in loaded:
            loaded[model] = build_chat_generator(ModelConfig(llm=model))
        return loaded[model]

    cache = LLMCache(CACHE / "eval_agreement" / "llm_cache.sqlite")

    SETS_DIR.mkdir(parents=True, exist_ok=True)
    filed_as = f"{args.set}.generated{writer_suffix(args.writer)}{generated_suffix(args.generated)}"
    generated_path, report_path = SETS_DIR / f"{filed_as}.jsonl", SETS_DIR / f"{filed_as}.report.json"
    stale = not generated_path.exists() or json.loads(report_path.read_text())["requested"] != args.generated
    if stale and not args.judge_only:  # the judge-only run reads no generated item
        with llm_cache(cache):
            items, report = generate_testset(index, generator(args.writer_model), n=args.generated, seed=SEED, chunk_ids=chosen, progress=None,
                                             question_context=args.question_context)
        save_testset(items, generated_path)
        report_path.write_text(json.dumps(report.summary() | {"writer_model": args.writer_model} | context_field(args.question_context), indent=1) + "\n")
    if args.generate_only:
        print(report_path.read_text())
        return 0
    larger = args.real > FIRST_REAL_DRAW
    real_path = SETS_DIR / (f"{args.set}.real{args.real}.jsonl" if larger else f"{args.set}.real.jsonl")
    if not real_path.exists() or len(load_testset(real_path)[0]) != args.real:
        save_testset(real_questions(args.spec, set(chosen), args.real), real_path)

    judge = LocalJudge(generator(args.judge_model), task=args.judge_task, model_name=args.judge_model)
    if args.judge_only:
        return judge_larger(args, config, index, llm, judge, cache, real_path, set(chosen), started)
    generation = json.loads(report_path.read_text())
    results: dict[str, dict[str, dict]] = {"generated": {}, "real": {}}
    for which, path in (("generated", generated_path), ("real", real_path)):
        items, _ = load_testset(path)
        for strategy in tqdm(strategies, desc=f"{args.set} {which}", file=sys.stderr):
            judged = which == "real" and strategy.name == "plain" and not larger
            run = EvalRun.open(run_folder(args.set, args.generated, args.real, args.writer, which, strategy.label), strategy, config, path, items,
                               known_chunks=set(index.chunks), judge_model=judge.label if judged else None, chat_generator=llm)
            rag = AgenticRAG(strategy.features, config=config, index=index, chat_generator=llm)
            results[which][strategy.label] = run.execute(rag, judge=judge if judged else None, cache=cache)
            results[which][strategy.label]["rows"] = run.rows()

    names = [s.label for s in strategies]
    rows = {which: {n: results[which][n]["rows"] for n in names} for which in results}
    figures = agreement_figures(rows)
    agreements = figures["agreements"]
    entry = {
        "strategies": names, "model": args.model, "writer_model": args.writer_model, **context_field(args.question_context), "judge_model": args.judge_model,
        "kendall_tau": figures["kendall_tau"], "kendall_tau_interval95": figures["kendall_tau_interval95"], "split_half_tau": figures["split_half_tau"],
        "judge_auc": figures["judge_auc"],
        "judge_n": figures["judge_n"], "judge_task": args.judge_task, "corpus_paragraphs": len(docs),
        "generated": {"requested": generation["requested"], "accepted": generation["accepted"], "by_kind": generation["by_kind"],
                      "rejected_by_reason": generation["rejected_by_reason"], "llm_calls": generation["llm_calls"]},
        "per_strategy": {which: {n: {"mrr": agreements["retrieval"][which][n], "correct": agreements["answer"][which][n],
                                     "p50_s": results[which][n]["aggregates"].get("latency_s", {}).get("p50"), "n": results[which][n]["aggregates"]["rows"]}
                                 for n in names} for which in results},
        "scored_items": figures["scored_items"],
        "paragraphs": args.paragraphs, "seed": SEED, "real_questions": len(load_testset(real_path)[0]),
        "command": "python bench/eval_agreement.py " + " ".join(sys.argv[1:]), "seconds": round(time.perf_counter() - started, 1),
    }
    data = json.loads(OUT.read_text()) if OUT.exists() else {"sets": {}}
    file_entry(data, args.set, entry)
    data["run"] = run_facts()
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: v for k, v in entry.items() if k != "per_strategy"}, indent=1))
    return 0


def keeping_the_earlier_figures(figures: dict, before: dict | None) -> dict:
    """The new ``larger_judge``, never losing the one it replaces: one measured with another faithfulness task
    is kept under ``other_tasks`` (by its task, with those it kept), one measured under llama.cpp's exact prefix
    reuse (each score a few hundredths off by the call before it) under ``before_aligned_reuse``."""
    if before and before.get("judge_task", "correct") != figures.get("judge_task", "correct"):
        before = dict(before)  # the caller's figures are left as they were
        other = {**before.pop("other_tasks", {}), before.get("judge_task", "correct"): before}
        figures["other_tasks"] = {task: kept for task, kept in other.items() if task != figures.get("judge_task", "correct")}
        return figures
    if before and "other_tasks" in before:
        figures["other_tasks"] = before["other_tasks"]
    if before and "prompt_reuse_block" not in before:
        figures["before_aligned_reuse"] = {k: before[k] for k in ("judge_auc", "judge_auc_interval95", "judge_n", "first_draw", "command") if k in before}
    elif before and "before_aligned_reuse" in before:
        figures["before_aligned_reuse"] = before["before_aligned_reuse"]
    return figures


def judge_larger(args, config: RagConfig, index, llm, judge: LocalJudge, cache: LLMCache, real_path, chosen: set[str], started: float) -> int:
    """plain on the larger real set, every answer judged; the figures to the set's ``larger_judge`` section."""
    items, _ = load_testset(real_path)
    plain = resolve("plain")
    run = EvalRun.open(judged_folder(args.set, args.real, args.judge_task), plain, config, real_path, items,
                       known_chunks=set(index.chunks), judge_model=judge.label, chat_generator=llm)
    rows_before = len(run.rows())  # a resumed run: its seconds are only this invocation's
    run.execute(AgenticRAG(plain.features, config=config, index=index, chat_generator=llm), judge=judge, cache=cache)
    first = {item.id for item in real_questions(args.spec, chosen, FIRST_REAL_DRAW)}
    figures = judge_figures(run.rows(), first) | {
        "real_questions": len(items), "judge_model": args.judge_model, "judge_task": args.judge_task, "model": args.model,
        "command": "python bench/eval_agreement.py " + " ".join(sys.argv[1:]), "seconds": round(time.perf_counter() - started, 1)}
    if rows_before:
        figures["seconds_cover_rows_after"] = rows_before
    figures["prompt_reuse_block"] = DEFAULT_BLOCK  # each judge score depends on its prompt alone (ragkit.llm.aligned_reuse)
    data = json.loads(OUT.read_text())
    data["sets"][args.set]["larger_judge"] = keeping_the_earlier_figures(figures, data["sets"][args.set].get("larger_judge"))
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
