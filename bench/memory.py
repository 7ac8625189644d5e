"""Peak memory of `ragkit ask --all-features` with the 1.5B, with and without llama.cpp's weight repacking.

llama.cpp's CPU backend repacks the Q4_K weights it can into an interleaved layout, in anonymous
memory, while the memory-mapped GGUF stays resident too: for the 1.5B about 0.6 GB more. ragkit turns
repacking off by default (``ModelConfig.repack_weights``, ``RAGKIT_REPACK_WEIGHTS``). This measures:

* the peak RSS (VmHWM) of the CLI command the issue names, one fresh process per setting, on the
  sample documents' index, with its split into anonymous and file-backed memory at the end;
* the speed cost, in one process: two 1.5B generators (repacking on / off) answer the same
  ``--prompts`` SQuAD dev RAG prompts (a question and its five top paragraphs), alternately, from a cold
  prompt cache; median seconds to evaluate the prompt and generated tokens per second; and whether
  the replies are identical (greedy decoding).

    .venv/bin/python bench/memory.py --prompts 8

Writes ``bench/results/memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

from squad_common import CACHE, ROOT, SQUAD_DEV, run_facts

OUT = ROOT / "bench" / "results" / "memory.json"
QUESTION = "Where was Nikola Tesla born, and what did he study?"
MODEL = "qwen2.5-coder-1.5b"
PEAK = """
import json, re, sys
from ragkit.ui.cli import main
rc = main(sys.argv[1:])
status = open("/proc/self/status").read()
mb = lambda key: int(re.search(rf"^{key}:\\s+(\\d+) kB", status, re.M).group(1)) / 1024
print("MEMORY " + json.dumps({"rc": rc, "peak_rss_mb": mb("VmHWM"), "rss_end_mb": mb("VmRSS"), "anon_end_mb": mb("RssAnon"), "file_end_mb": mb("RssFile")}))
"""


def peak(index_dir: str, repack: bool) -> dict:
    env = {**os.environ, "RAGKIT_REPACK_WEIGHTS": "1" if repack else "0"}
    done = subprocess.run([sys.executable, "-c", PEAK, "ask", QUESTION, "--all-features", "--llm", MODEL, "--index-dir", index_dir, "--json"],
                          capture_output=True, text=True, env=env, timeout=900)
    line = next(line for line in done.stdout.splitlines()[::-1] if line.startswith("MEMORY "))
    figures = json.loads(line[len("MEMORY "):])
    answer = json.loads(done.stdout[:done.stdout.rindex("MEMORY ")])["answer"]
    return {k: round(v) if isinstance(v, float) else v for k, v in figures.items()} | {"answer": answer}


def speed(prompts: int) -> dict:
    from haystack.dataclasses import ChatMessage

    from ragkit.eval.experiments import load_squad_corpus
    from ragkit.llm.generators import reset_prompt_cache
    from ragkit.llm.portable import PortableLlamaCppChatGenerator

    docs, questions = load_squad_corpus(SQUAD_DEV)
    by_id = {d.id: d for d in docs}
    rng = random.Random(5)
    asked = rng.sample(questions, prompts)
    generators = {}
    for repack in (True, False):
        generators[repack] = PortableLlamaCppChatGenerator(model=MODEL, generation_kwargs={"max_tokens": 48, "temperature": 0.0}, repack_weights=repack)
        generators[repack].warm_up()
    rows: dict[bool, list] = {True: [], False: []}
    for q in asked:
        paragraph = by_id[q["doc_id"]].content
        others = [d.content for d in rng.sample(docs, 4)]
        context = "\n\n".join(f"[{i + 1}] {text}" for i, text in enumerate([paragraph, *others]))
        messages = [ChatMessage.from_system("Answer from the sources, briefly, with citations like [1]."),
                    ChatMessage.from_user(f"Sources:\n{context}\n\nQuestion: {q['question']}")]
        for repack in (True, False) if len(rows[True]) % 2 == 0 else (False, True):  # alternate who goes first
            llm = generators[repack]
            reset_prompt_cache(llm)
            start = time.perf_counter()
            first = llm.run(messages, generation_kwargs={"max_tokens": 1})["replies"][0]
            prompt_s = time.perf_counter() - start
            reset_prompt_cache(llm)
            start = time.perf_counter()
            reply = llm.run(messages)["replies"][0]
            total = time.perf_counter() - start
            tokens = reply.meta.get("usage", {}).get("completion_tokens") or 1
            rows[repack].append({"prompt_s": prompt_s, "gen_tok_s": max(tokens - 1, 1) / max(total - prompt_s, 1e-3), "reply": reply.text,
                                 "prompt_tokens": reply.meta.get("usage", {}).get("prompt_tokens"), "first": first.text})
    same = sum(a["reply"] == b["reply"] for a, b in zip(rows[True], rows[False]))
    summary = {name: {"prompt_s_p50": round(statistics.median(r["prompt_s"] for r in rows[flag]), 3),
                      "generated_tokens_per_s_p50": round(statistics.median(r["gen_tok_s"] for r in rows[flag]), 2)}
               for name, flag in (("repack", True), ("no_repack", False))}
    summary["prompt_tokens_p50"] = statistics.median(r["prompt_tokens"] or 0 for r in rows[True])
    summary["identical_replies"] = f"{same}/{len(asked)}"
    summary["prompt_time_ratio_no_repack_over_repack"] = round(summary["no_repack"]["prompt_s_p50"] / summary["repack"]["prompt_s_p50"], 3)
    summary["generation_speed_ratio_no_repack_over_repack"] = round(
        summary["no_repack"]["generated_tokens_per_s_p50"] / summary["repack"]["generated_tokens_per_s_p50"], 3)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    args = parser.parse_args()

    from ragkit.config import RagConfig
    from ragkit.index.indexer import build_index

    index_dir = CACHE / "memory_sample_index"
    build_index(ROOT / "sample_docs", index_dir, RagConfig(), progress=False)
    result = {"command": "python bench/memory.py " + " ".join(sys.argv[1:]), "question": QUESTION, "model": MODEL, "goal_peak_rss_mb": 2200,
              "peak": {"repack": peak(str(index_dir), True), "no_repack": peak(str(index_dir), False)}, "speed": speed(args.prompts), "run": run_facts()}
    OUT.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "run"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
