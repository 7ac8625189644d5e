"""``ragkit`` command line: ``index PATH``, ``ask "question"``, ``info``."""

from __future__ import annotations

import argparse
import json
import sys

import ragkit  # noqa: F401  (sets the offline / no-telemetry defaults before Haystack loads)
from ragkit.config import RagConfig
from ragkit.pipeline.rag import DEFAULT_INDEX_DIR


def _config(args) -> RagConfig:
    config = RagConfig.from_yaml(args.config) if args.config else RagConfig()
    config = RagConfig.from_env(config)
    if getattr(args, "llm", None):
        config.models.llm = args.llm
    if getattr(args, "top_k", None):
        config.top_k = args.top_k
    if getattr(args, "mode", None):
        config.retrieval_mode = args.mode
    if getattr(args, "hierarchical", False):
        config.index.hierarchical = True
    config.validate()
    return config


def cmd_index(args, console) -> int:
    from ragkit.index.indexer import build_index

    report = build_index(args.path, args.index_dir, _config(args), rebuild=args.rebuild, remove_missing=args.remove_missing, progress=not args.quiet)
    console.print(
        f"[bold]Indexed[/] {len(report.added)} file(s) ({report.chunks_added} chunks), "
        f"{len(report.unchanged)} unchanged, {len(report.removed)} removed → {report.total_chunks} chunks in "
        f"{report.index_dir} ({report.seconds:.1f}s)"
    )
    for source, reason in report.skipped:
        console.print(f"[yellow]skipped[/] {source}: {reason}")
    return 0


def cmd_ask_agentic(args, console) -> int:
    from rich.table import Table

    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    features = Features.from_yaml(args.features) if args.features else Features()
    if args.all_features:
        features = Features.all_on(**{k: v for k, v in features.to_dict().items() if k not in ("routing", "hyde", "rerank", "grading", "hallucination_check", "self_correction", "confidence_floor")})
    config = _config(args)
    if args.top_k:
        features.top_k = args.top_k
    if args.mode:
        features.retrieval_mode = args.mode
    result = AgenticRAG(features.validate(), index_dir=args.index_dir, config=config).ask(args.question)
    trace = result.trace
    if args.json:
        print(json.dumps({
            "question": result.question, "answer": result.answer, "confidence": result.confidence, "symbol": result.symbol,
            "route": result.route, "exit_reason": result.exit_reason, "declined": result.declined, "corrections": result.corrections,
            "p_lacks_answer": result.p_lacks_answer, "failed": result.failed, "failed_steps": result.failed_steps,
            "sources": [{"source": d.meta.get("source"), "page": d.meta.get("page"), "section": d.meta.get("section"), "score": d.score} for d in result.sources],
            "seconds": result.seconds, "trace": trace.table(),
        }, indent=1, default=str))
        return 0
    console.print(f"[bold]Q:[/] {result.question}")
    console.print(f"[bold green]A:[/] {result.answer}")
    sureness = (f"declined (sources lack the answer: {result.p_lacks_answer:.0%} sure)" if result.p_lacks_answer is not None else "declined") if result.declined else (
        f"{result.symbol} {result.confidence:.2f} chance the answer is right" if result.confidence is not None else "")
    failed = f"failed: {', '.join(result.failed_steps)}" if result.failed_steps else ""
    facts = [sureness, failed, f"route {result.route}" if result.route else "",
             f"exit {result.exit_reason}" if result.exit_reason else "", f"{result.seconds:.2f} s", f"{trace.llm_calls} LLM calls",
             f"{trace.prompt_tokens_evaluated} prompt tokens evaluated, {trace.prompt_tokens_reused} reused"]
    console.print(" · ".join(f for f in facts if f))
    table = Table(title="Trace")
    rows = trace.table()
    for col in (rows[0] if rows else {}):
        table.add_column(col)
    for row in rows:
        table.add_row(*[str(v) for v in row.values()])
    console.print(table)
    return 0


def cmd_ask(args, console) -> int:
    from rich.table import Table

    from ragkit.pipeline.rag import RAG

    if args.features or args.all_features:
        return cmd_ask_agentic(args, console)

    rag = RAG(args.index_dir, _config(args))
    answer = rag.ask(args.question)
    if args.json:
        print(
            json.dumps(
                {
                    "question": answer.question,
                    "answer": answer.answer,
                    "sources": [{"source": d.meta.get("source"), "page": d.meta.get("page"), "section": d.meta.get("section"), "score": d.score} for d in answer.sources],
                    "timings_s": answer.timings,
                    "usage": answer.usage,
                    "note": answer.note,
                },
                indent=1,
            )
        )
        return 0
    console.print(f"[bold]Q:[/] {answer.question}")
    console.print(f"[bold green]A:[/] {answer.answer}")
    if answer.note:
        console.print(f"[dim]({answer.note})[/]")
    sources = Table(title="Sources", show_lines=False)
    for col in ("#", "source", "where", "score"):
        sources.add_column(col)
    for i, doc in enumerate(answer.sources, 1):
        where = ", ".join(f"{k} {doc.meta[k]}" for k in ("page", "section") if doc.meta.get(k) is not None)
        sources.add_row(str(i), str(doc.meta.get("source")), where, f"{doc.score:.4f}" if doc.score is not None else "")
    console.print(sources)
    latency = Table(title="Latency per stage")
    latency.add_column("stage")
    latency.add_column("ms", justify="right")
    for stage, seconds in answer.timings.items():
        latency.add_row(stage, f"{seconds * 1000:.1f}")
    if answer.warm_seconds != answer.total_seconds:
        latency.add_row("total without model loading", f"{answer.warm_seconds * 1000:.1f}")
    latency.add_row("[bold]total[/]", f"[bold]{answer.total_seconds * 1000:.1f}[/]")
    console.print(latency)
    if answer.usage:
        console.print(f"[dim]tokens: {answer.usage}[/]")
    return 0


def cmd_info(args, console) -> int:
    from ragkit.index.store import RagIndex
    from ragkit.llm.models import EMBEDDED_LLMS

    config = _config(args)
    console.print(f"embedder: {config.models.embedder}; LLM: {config.models.llm} via {config.models.llm_backend}")
    for name, spec in EMBEDDED_LLMS.items():
        console.print(f"  embedded LLM {name}: {spec.description}")
    if RagIndex.exists(args.index_dir):
        index = RagIndex.load(args.index_dir)
        console.print(f"index {args.index_dir}: {len(index)} chunks from {len(index.sources)} sources, embedder {index.embedder}")
        for source, info in sorted(index.sources.items()):
            console.print(f"  {source}: {info.chunks} chunks")
    else:
        console.print(f"no index at {args.index_dir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--index-dir", default=DEFAULT_INDEX_DIR, help=f"index folder (default {DEFAULT_INDEX_DIR})")
    common.add_argument("--config", help="YAML file with ragkit settings (see README)")
    parser = argparse.ArgumentParser(prog="ragkit", description="Index documents and ask questions about them, offline.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("index", parents=[common], help="add a file or folder (.md .txt .pdf .html) to the index")
    p.add_argument("path")
    p.add_argument("--rebuild", action="store_true", help="start a new index instead of updating")
    p.add_argument("--remove-missing", action="store_true", help="drop indexed sources whose files are gone")
    p.add_argument("--hierarchical", action="store_true", help="parent/child chunks (small to find, large to answer)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("ask", parents=[common], help="answer a question from the index, with sources and per-stage latency")
    p.add_argument("question")
    p.add_argument("--top-k", type=int)
    p.add_argument("--mode", choices=["dense", "sparse", "hybrid"])
    p.add_argument("--llm", help="embedded model name (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b) or a .gguf path")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--features", help="YAML file of agentic Features (routing, hyde, rerank, grading, ...): answer with AgenticRAG")
    p.add_argument("--all-features", action="store_true", help="every agentic feature on (Features.all_on())")
    p.set_defaults(func=cmd_ask)

    p = sub.add_parser("info", parents=[common], help="show the configured models and what the index holds")
    p.set_defaults(func=cmd_info)
    return parser


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from ragkit.index.store import IndexError_
    from ragkit.index.ingest import IngestError
    from ragkit.llm.models import MissingModelError
    from ragkit.index.retrieval import QueryError

    args = build_parser().parse_args(argv)
    console = Console(stderr=False)
    try:
        return args.func(args, console)
    except (IndexError_, IngestError, MissingModelError, QueryError, ValueError) as exc:
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
