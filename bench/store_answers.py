"""Same chunks, same prompt, same answer? ``Features.all_on()`` answering on the local index, on
PostgreSQL + pgvector and on Milvus, with one LLM (greedy decoding), on ``--questions`` SQuAD dev
questions (seed 1; every paragraph one chunk).

The local index is migrated into a PostgreSQL and a Milvus (milvus-lite's server) started here, the
vectors copied; each question is asked on each store by an :class:`~ragkit.pipeline.engine.AgenticRAG`
sharing one generator. Reported: the share of questions whose answer text is identical to the local
index's on each store, the share whose sources (ids, in order) are identical, and each differing
question with both answers, so a difference can be read rather than guessed at (where the sources
were the same, the local index is asked once more, to show whether its own answer repeats).
llama.cpp's prompt cache is emptied before every question, so each store's prompt is evaluated the
same way. The bi-encoder
reranker's sentence vectors are prepared once before timing (they are per process, shared by all three).

Writes ``answers`` into ``bench/results/store_parity.json``.

    .venv/bin/python bench/store_answers.py --questions 100 --model qwen2.5-coder-0.5b
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile

from answer_quality import SETS
from squad_common import CACHE, ROOT, run_facts

OUT = ROOT / "bench" / "results" / "store_parity.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    args = parser.parse_args()

    from ragkit.config import ModelConfig, RagConfig
    from ragkit.eval.experiments import index_documents, load_squad_corpus
    from ragkit.index.servers import start_milvus, start_postgres
    from ragkit.index.stores import migrate, open_store
    from ragkit.llm.generators import build_chat_generator, reset_prompt_cache
    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    docs, questions = load_squad_corpus(SETS["squad_dev"])
    local = index_documents(docs, CACHE / "squad_dev_index_all-MiniLM-L6-v2")
    asked = random.Random(1).sample(questions, args.questions)
    config = RagConfig(models=ModelConfig(llm=args.model, max_new_tokens=96))
    llm = build_chat_generator(config.models)
    with tempfile.TemporaryDirectory(prefix="ragkit-answers-pg-") as pg_folder, tempfile.TemporaryDirectory(prefix="ragkit-answers-milvus-") as milvus_folder, \
            start_postgres(pg_folder) as postgres, start_milvus(milvus_folder) as milvus:
        indexes = {"local": local}
        for name, url in (("pgvector", postgres.url), ("milvus", milvus.url)):
            indexes[name] = open_store(url, embedder=local.embedder, dim=local.dim)
            migrate(local, indexes[name])
        engines = {name: AgenticRAG(Features.all_on(), index=index, config=config, chat_generator=llm) for name, index in indexes.items()}
        for engine in engines.values():
            engine.prepare_sentence_vectors()
        answers: dict[str, list] = {name: [] for name in engines}
        # llama.cpp's prompt cache is emptied before every question: a prompt evaluated from a warm prefix takes
        # another floating-point path than one evaluated whole, which can flip a near-tie in greedy decoding
        # (seen: "Golden Super Bowl" cold, "themed" warm, from the same prompt). No latency here either
        # (store_parity.py times the retrieval itself).
        for q in asked:
            for name, engine in engines.items():
                reset_prompt_cache(llm)
                result = engine.ask(q["question"])
                answers[name].append((result.answer, [d.id for d in result.sources], result.confidence))
        # a question answered differently from the same sources: ask the local index again, the same way, to see
        # whether the local answer itself repeats
        again = {}
        for i, q in enumerate(asked):
            if any(answers[name][i][0] != answers["local"][i][0] and answers[name][i][1] == answers["local"][i][1] for name in ("pgvector", "milvus")):
                reset_prompt_cache(llm)
                again[q["question"]] = engines["local"].ask(q["question"]).answer
    entry = {"questions": len(asked), "model": args.model, "features": "Features.all_on()", "stores": {}}
    for name in ("pgvector", "milvus"):
        same_answer = [a[0] == b[0] for a, b in zip(answers["local"], answers[name])]
        same_sources = [a[1] == b[1] for a, b in zip(answers["local"], answers[name])]
        differing = [{"question": q["question"], "local": a[0], name: b[0], "same_sources": a[1] == b[1],
                      **({"local_asked_again": again[q["question"]]} if q["question"] in again else {})}
                     for q, a, b in zip(asked, answers["local"], answers[name]) if a[0] != b[0]]
        entry["stores"][name] = {"identical_answers": round(statistics.mean(same_answer), 4), "identical_sources": round(statistics.mean(same_sources), 4),
                                 "differing": differing}
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data["answers"] = entry
    data.setdefault("commands", {})["answers"] = "python bench/store_answers.py " + " ".join(sys.argv[1:])
    data.setdefault("run", {})["answers"] = run_facts()
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: v for k, v in entry.items()}, indent=1)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
