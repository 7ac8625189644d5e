"""Save the figures the README shows, from a real run (the 0.5B model on sample_docs/) and from the
committed agentic benchmark. The same functions draw them in the notebooks.

    .venv/bin/python examples/readme_figures.py        # ~1 min on 2 cores → docs/images/*.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from ragkit.ui import plots  # noqa: E402
from ragkit.pipeline.engine import AgenticRAG  # noqa: E402
from ragkit.config import FAST_LLM, ModelConfig, RagConfig  # noqa: E402
from ragkit.pipeline.features import Features  # noqa: E402
from ragkit.index.indexer import build_index  # noqa: E402
from ragkit.llm.generators import build_chat_generator, reset_prompt_cache  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"
QUESTION = "Which team won Super Bowl 50?"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    index_dir = ROOT / ".ragkit" / "notebook_index"
    config = RagConfig(models=ModelConfig(llm=FAST_LLM, max_new_tokens=96))
    build_index(ROOT / "sample_docs", index_dir, config, progress=False)
    generator = build_chat_generator(config.models)
    plain = AgenticRAG(Features(), index_dir=index_dir, config=config, chat_generator=generator)
    full = AgenticRAG(Features.all_on(), index_dir=index_dir, config=config, chat_generator=generator)
    plain.ask("warm-up: what is Python?")
    full.ask("warm-up: what is Python?")
    reset_prompt_cache(generator)  # each side from a cold prompt cache, as in the A/B view
    a = plain.ask(QUESTION)
    reset_prompt_cache(generator)
    b = full.ask(QUESTION)
    fig = plots.ab_figure(a, b, ("plain", "all features"))
    fig.suptitle(f"A/B on “{QUESTION}” ({FAST_LLM}, 2 CPU cores)", fontsize=10)
    fig.tight_layout()
    fig.savefig(OUT / "ab_view.png", dpi=110)
    fig = plots.latency_waterfall(b.trace, title=f"all features on: where the {b.seconds:.1f} s go")
    fig.savefig(OUT / "latency_waterfall.png", dpi=110)

    results = json.loads((ROOT / "bench" / "results" / "agentic_squad.json").read_text())
    small = {name: row for name, row in results["configs"].items() if row["model"] == FAST_LLM}
    fig = plots.quality_latency_scatter(small, quality="f1")
    fig.axes[0].set_title(f"SQuAD F1 vs p50 latency, {results['questions']} questions, {FAST_LLM}", fontsize=9)
    fig.savefig(OUT / "agentic_squad_f1_vs_latency.png", dpi=110)
    for name in ("ab_view.png", "latency_waterfall.png", "agentic_squad_f1_vs_latency.png"):
        print(OUT / name)
    print(f"plain: {a.answer!r} {a.seconds:.2f} s; all features: {b.answer!r} {b.seconds:.2f} s, {b.symbol} {b.confidence:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
