"""Does a generated question ask for a number in the unit its answer counts in? The unit asked for vs the unit banned.

A test-set answer such as "21,000 years" is picked from a sentence before the question is written
(:mod:`ragkit.eval.answer_spans`); the LLM then writes the question with the answer's words banned. Banning the
unit too ("years") left the 0.5B asking "What number of decades …?". ``ragkit.eval.generate`` now opens such a
question with its unit ("How many years" | "What number of years") and never bans it. This script writes every
number-with-unit answer's question both ways, in the same process and model:

* ``unit_asked``: :func:`ragkit.eval.generate.write_question` as shipped;
* ``unit_banned``: the previous rule — the number grammar's usual openings, the unit banned with the answer's other words.

and counts the questions whose counted word (after "How many", "What number of", "What percentage") is the
answer's unit or a spelling of it ("kilometers" for "km"). The sentences: every one of the committed generated
sets (``bench/results/eval_agreement/*.generated.jsonl``) and of ``sample_docs`` holding such an answer, each
written as a plain and a paraphrase question.

    .venv/bin/python bench/question_units.py      # ~2 min with the 0.5B -> bench/results/question_units.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ragkit.config import ModelConfig  # noqa: E402
from ragkit.eval.answer_spans import answer_spans, counted_unit  # noqa: E402
from ragkit.eval.questions import (parse_question, question_banned_words, question_kwargs, question_messages, question_starts,  # noqa: E402
                                  write_question)
from ragkit.index.ingest import load_files  # noqa: E402
from ragkit.index.sentences import sentence_spans  # noqa: E402
from ragkit.llm.generators import build_chat_generator  # noqa: E402
from ragkit.llm.structured import call_llm  # noqa: E402

SPELLINGS = {"km": {"km", "kilometers", "kilometres"}, "meters": {"meters", "metres"}, "metres": {"meters", "metres"},
             "percent": {"percent", "percentage"}, "miles": {"miles"}, "feet": {"feet"}, "people": {"people"}, "years": {"years"}}
COUNTED_WORD = re.compile(r"^(?:how many|how much|what number of)\s+(\S+)|^what (percent)(?:age)?\b", re.I)  # "What percentage" counts in percent


def unit_sentences() -> list[tuple[str, str]]:
    sentences: list[str] = []
    for path in sorted((REPO / "bench" / "results" / "eval_agreement").glob("*.generated.jsonl")):
        sentences += [s for line in path.read_text().splitlines() if (s := (json.loads(line).get("meta") or {}).get("sentence"))]
    for doc in load_files(REPO / "sample_docs").documents:
        text = doc.content or ""
        sentences += [text[a:b] for a, b in sentence_spans(text, min_chars=40)]
    cases = [(s, answer) for s in dict.fromkeys(sentences) for answer, kind in answer_spans(s) if kind == "number" and counted_unit(answer)]
    return list(dict.fromkeys(cases))


def unit_banned_question(generator, sentence: str, answer: str, paraphrase: bool) -> str | None:
    """The previous rule: the usual number openings, the unit banned with the answer's other words."""
    banned = sorted(set(question_banned_words(sentence, answer, paraphrase, question_starts("number"))) | {counted_unit(answer)})
    reply = call_llm(generator, question_messages(sentence, answer, paraphrase), parse_question,
                     question_kwargs(generator, "number", banned), step="testset_question")
    return reply.value if reply.ok else None


def asks_in_its_unit(question: str | None, answer: str) -> bool:
    if not question:
        return False
    word = COUNTED_WORD.match(question)
    return bool(word) and (word.group(1) or word.group(2)).lower().strip("?,") in SPELLINGS.get(counted_unit(answer), {counted_unit(answer)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llm", default="qwen2.5-coder-0.5b")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "question_units.json"))
    args = parser.parse_args()
    generator = build_chat_generator(ModelConfig(llm=args.llm))
    generator.warm_up()
    rows = []
    for sentence, answer in unit_sentences():
        for paraphrase in (False, True):
            started = time.perf_counter()
            asked, _ = write_question(generator, sentence, answer, "number", paraphrase=paraphrase)
            asked_s = time.perf_counter() - started
            started = time.perf_counter()
            banned = unit_banned_question(generator, sentence, answer, paraphrase)
            rows.append({"answer": answer, "paraphrase": paraphrase, "unit_asked": asked, "unit_banned": banned,
                         "seconds": {"unit_asked": round(asked_s, 2), "unit_banned": round(time.perf_counter() - started, 2)}})
            print(f"{answer!r:>20}  asked: {asked}\n{'':>20}  banned: {banned}", flush=True)
    summary = {rule: {"questions": sum(r[rule] is not None for r in rows),
                      "in_its_unit": sum(asks_in_its_unit(r[rule], r["answer"]) for r in rows),
                      "median_s": round(statistics.median(r["seconds"][rule] for r in rows), 2)} for rule in ("unit_asked", "unit_banned")}
    result = {"model": args.llm, "written": len(rows), "answers": len({r["answer"] for r in rows}), "summary": summary,
              "command": "python bench/question_units.py", "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
