"""Index sample_docs/ and ask one question from Python — the same steps as `make demo`.

Run from the repository root:  .venv/bin/python examples/quickstart.py "Who founded the Yuan dynasty?"
"""

import sys

from ragkit import AgenticRAG, Features
from ragkit.config import RagConfig
from ragkit.index.indexer import build_index

question = sys.argv[1] if len(sys.argv) > 1 else "Where was Nikola Tesla born?"
config = RagConfig.from_env()  # RAGKIT_LLM=qwen2.5-coder-0.5b for the faster model
report = build_index("sample_docs", ".ragkit/index", config)
print(f"{report.total_chunks} chunks ({len(report.added)} files added, {len(report.unchanged)} unchanged)")

answer = AgenticRAG(Features(), ".ragkit/index", config).ask(question)  # Features(): plain RAG
print("\nQ:", answer.question)
print("A:", answer.answer)
for i, doc in enumerate(answer.sources, 1):
    print(f"  [{i}] {doc.meta['source']} (score {doc.score:.3f})")
print(f"confidence {answer.symbol} {answer.confidence:.2f} (estimated chance the answer is right)")
print("latency:", {step.name: f"{step.seconds * 1000:.0f} ms" for step in answer.trace.steps})
