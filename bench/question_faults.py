"""What the question writer's new mask and checks change: glued words, replies cut off at the word limit, loops.

A generated test-set question is written by the LLM under a grammar and a mask that bans the answer's words (for a
paraphrase, the sentence's content words too; :mod:`ragkit.eval.questions`). The 0.5B dodged the mask by gluing
("rainforest", banned as its first token " rain", came out " rainfall" + "forest" = "rainfallforest"), and a reply that
reached the grammar's word limit glued what it still meant to say into its last word ("in.NieuweMaas"). This script
writes each question again from its sentence and answer, with two masks in the same process and model:

* ``first_piece``: the previous mask, a banned word's first token only;
* ``shipped``: :class:`ragkit.eval.questions.BannedWords` as shipped (a word-like second piece banned too).

The questions: every single and paraphrase item of the committed generated sets
(``bench/results/eval_agreement/*.generated.jsonl``) and the number-with-unit sentences of ``bench/question_units.py``
(where "rainfallforest" was seen). It counts the faults :func:`ragkit.eval.questions.question_fault` now rejects
(``too_long``, ``repeats_itself``) under each mask, and lists every question the two masks write differently, both
versions side by side: whether a word is glued is read there, by a person — a spelling rule cannot tell
"rainfallforest" from a rare real word, and one tried here flagged "groundbreaking" and "houses".

    .venv/bin/python bench/question_faults.py      # ~8 min with the 0.5B -> bench/results/question_faults.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llama_cpp import LogitsProcessorList  # noqa: E402

from ragkit.config import ModelConfig  # noqa: E402
from ragkit.eval.questions import (BannedWords, answer_form, parse_question, question_banned_words, question_fault,  # noqa: E402
                                   question_kwargs, question_messages, question_starts)
from ragkit.llm.generators import build_chat_generator  # noqa: E402
from ragkit.llm.structured import call_llm  # noqa: E402
from question_units import unit_sentences  # noqa: E402  (bench/, beside this script)

MASKS = ("first_piece", "shipped")
FAULTS = ("too_long", "repeats_itself", "unusable_reply")


def items_to_write() -> list[dict]:
    items = []
    for path in sorted((REPO / "bench" / "results" / "eval_agreement").glob("*.generated.jsonl")):
        for line in path.read_text().splitlines():
            item = json.loads(line)
            if item["kind"] in ("single", "paraphrase") and (item.get("meta") or {}).get("sentence"):
                items.append({"set": path.name.split(".")[0], "kind": item["kind"], "sentence": item["meta"]["sentence"],
                              "answer": item["answers"][0], "answer_type": item["meta"]["answer_type"]})
    for sentence, answer in unit_sentences():
        for kind in ("single", "paraphrase"):
            items.append({"set": "question_units", "kind": kind, "sentence": sentence, "answer": answer, "answer_type": "number"})
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llm", default="qwen2.5-coder-0.5b")
    parser.add_argument("--limit", type=int, default=0, help="only the first N items (0: all)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "question_faults.json"))
    args = parser.parse_args()
    generator = build_chat_generator(ModelConfig(llm=args.llm))
    generator.warm_up()
    llm = generator._model
    items = items_to_write()[: args.limit or None]
    rows = []
    for n, item in enumerate(items, 1):
        form = answer_form(item["answer_type"], item["answer"])
        starts = question_starts(item["answer_type"], form)
        banned = question_banned_words(item["sentence"], item["answer"], item["kind"] == "paraphrase", starts)
        row = {**{k: item[k] for k in ("set", "kind", "answer")}, "seconds": {}}
        for mask in MASKS if n % 2 else MASKS[::-1]:  # alternate: the second call finds llama.cpp's prompt cache warm
            kwargs = question_kwargs(generator, item["answer_type"], banned, form)
            if mask == "first_piece" and banned:
                kwargs["logits_processor"] = LogitsProcessorList([BannedWords.for_model(llm, banned, second_pieces=False)])
            started = time.perf_counter()
            reply = call_llm(generator, question_messages(item["sentence"], item["answer"], item["kind"] == "paraphrase"),
                             parse_question, kwargs, step="testset_question")
            row["seconds"][mask] = round(time.perf_counter() - started, 2)
            question = reply.value if reply.ok else None
            row[mask] = {"question": question, "fault": question_fault(question, starts) if question else "unusable_reply"}
        rows.append(row)
        print(f"{n}/{len(items)} {item['answer']!r}\n  first_piece: {row['first_piece']['question']}\n  shipped:     {row['shipped']['question']}", flush=True)
    summary = {mask: {"written": len(rows), **{fault: sum(r[mask]["fault"] == fault for r in rows) for fault in FAULTS},
                      "kept": sum(r[mask]["fault"] is None for r in rows),
                      "median_s": round(statistics.median(r["seconds"][mask] for r in rows), 2)} for mask in MASKS}
    changed = [{k: r[k] for k in ("set", "kind", "answer")} | {mask: r[mask]["question"] for mask in MASKS}
               for r in rows if r["first_piece"]["question"] != r["shipped"]["question"]]
    summary["written_differently"] = len(changed)
    result = {"model": args.llm, "items": len(rows), "summary": summary, "changed": changed, "command": "python bench/question_faults.py", "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
