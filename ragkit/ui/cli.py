"""``ragkit`` command line: ``index PATH``, ``ask "question"``, ``chat``, ``pipeline``, ``export``, ``serve``, ``info``; the
evaluation commands (``testset``, ``eval``, ``report``, ``tune``, ``strategies``) are :mod:`ragkit.ui.cli_eval`'s."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import ragkit  # noqa: F401  (sets the offline / no-telemetry defaults before Haystack loads)
from ragkit.index.store import DEFAULT_INDEX_DIR
from ragkit.index.versions import IndexError_
from ragkit.ui.cli_common import config_from_args as _config
from ragkit.ui.cli_common import Interrupted, index_location, live_version, print_files_not_read, quiet_model_loading, shown
from ragkit.ui.cli_common import forget_interrupt_seen_in_c_code as _forget_interrupt_seen_in_c_code
from ragkit.ui.cli_agreement import add_agreement_command
from ragkit.ui.cli_eval import add_eval_commands
from ragkit.ui.cli_serve import add_serve_commands



def cmd_index(args, console) -> int:
    """Index PATH; removals by --remove-missing are announced before the embedding starts (Ctrl-C
    then keeps the index as it was) and listed again when done; --dry-run changes nothing."""
    from ragkit.index.indexer import build_index
    from ragkit.index.stores import is_store_url

    def names(sources: list[str], most: int = 20) -> str:
        listed = ", ".join(shown(s) for s in sources[:most])
        return listed + (f" … and {len(sources) - most} more" if len(sources) > most else "")

    def announce(plan) -> None:
        if plan.removed:
            console.print(f"[yellow]removing {len(plan.removed)} source(s)[/] no longer found under {shown(str(args.path))}: {names(plan.removed)}")

    config = _config(args)
    if args.to is not None or (args.path == "migrate" and not Path("migrate").exists()):
        return _migrate(args, config, console)
    where = index_location(args, config)
    live_before = live_version(where)
    try:
        report = build_index(
            args.path, where, config, rebuild=args.rebuild, remove_missing=args.remove_missing, progress=not args.quiet,
            dry_run=args.dry_run, lock_timeout=args.lock_timeout, on_plan=announce, collection=args.collection, description=args.description,
        )
    except KeyboardInterrupt:
        if is_store_url(where):
            raise Interrupted("the files finished before it are in the store; run the same command again to continue "
                              "(finished files are skipped, nothing is duplicated)") from None
        if live_version(where) == live_before:
            raise Interrupted(f"the index at {where} is unchanged (nothing of this run was saved)") from None
        raise Interrupted(f"the index at {where} was saved whole just before (this run's files are in it)") from None
    into = f" into collection {shown(report.collection)}" if report.collection else ""
    if report.dry_run:
        console.print(
            f"[bold]Dry run[/] (nothing written): would index {len(report.added)} file(s){into}, {len(report.unchanged)} unchanged, "
            f"would remove {len(report.removed)} source(s); {shown(report.index_dir)} holds {report.total_chunks} chunks"
        )
        for source in report.added:
            console.print(f"  would index {shown(source)}")
        for source in report.moved:
            console.print(f"  would move {shown(source)}{into}")
        if report.description_changed:
            console.print(f"  would set the description of collection {shown(report.collection or 'default')}")
        for source in report.removed:
            console.print(f"  [yellow]would remove[/] {shown(source)}")
    else:
        console.print(
            f"[bold]Indexed[/] {len(report.added)} file(s) ({report.chunks_added} chunks){into}, "
            f"{len(report.unchanged)} unchanged, {len(report.removed)} removed → {report.total_chunks} chunks in "
            f"{shown(report.index_dir)} ({report.seconds:.1f}s)"
        )
        if report.moved:
            console.print(f"moved {len(report.moved)} unchanged file(s){into} (not re-embedded): {names(report.moved)}")
        if report.description_changed:
            console.print(f"description of collection {shown(report.collection or 'default')} set")
        if report.removed:
            console.print(f"removed {len(report.removed)} source(s): {names(report.removed)}")
    print_files_not_read(report, console)
    return 0


def _migrate(args, config, console) -> int:
    """`ragkit index migrate --to URL`: the local index (--index-dir) copied into a store, vectors as they are."""
    from rich.progress import Progress

    from ragkit.index.store import RagIndex
    from ragkit.index.stores import is_store_url, migrate, open_store

    if args.path != "migrate" or not args.to:
        raise ValueError("to copy a local index into a store: ragkit index migrate --to postgresql://…|milvus://… [--index-dir FOLDER]")
    if not is_store_url(args.to):
        raise ValueError(f"--to takes a store URL (postgresql://… or milvus://…), not {args.to!r}")
    local = RagIndex.load(args.index_dir)
    target = open_store(args.to, embedder=local.embedder, dim=local.dim)
    with Progress(console=console, transient=True, disable=args.quiet) as bar:
        task = bar.add_task("copying chunks", total=len(local))
        counts = migrate(local, target, progress=lambda n: bar.advance(task, n))
    console.print(f"[bold]Migrated[/] {counts['chunks']} chunks from {len(local.sources)} sources in {shown(args.index_dir)} "
                  f"to {shown(target.location)}: the store holds all {counts['in_store']} (vectors copied, not re-embedded)")
    return 0


def _features(args):
    from ragkit.pipeline.features import Features

    features = Features.from_yaml(args.features) if getattr(args, "features", None) else Features()
    if getattr(args, "all_features", False):
        features = Features.all_on(**{k: v for k, v in features.to_dict().items() if k not in ("routing", "hyde", "rerank", "grading", "hallucination_check", "self_correction", "confidence_floor")})
    if getattr(args, "top_k", None):
        features.top_k = args.top_k
    if getattr(args, "mode", None):
        features.retrieval_mode = args.mode
    if getattr(args, "answer_mode", None):
        features.answer_mode = args.answer_mode
    if getattr(args, "decompose", False):
        features.decompose = True
    if getattr(args, "collection", None):  # named collections override the selector
        features.collections = list(args.collection)
    if getattr(args, "select_collections", None):
        features.select_collections = args.select_collections
    if getattr(args, "fallback", False):
        features.fallback = True
    return features.validate()


def _engine(args, config=None, index=None):
    from ragkit.pipeline.engine import AgenticRAG

    return AgenticRAG(_features(args), index_dir=args.index_dir, config=config or _config(args), index=index)


def cmd_ask(args, console) -> int:
    """One engine for every question: `Features()` (plain RAG) unless --features / --all-features.

    Exit status: 0 answered (a step that degraded is named on stderr and lowers the confidence),
    3 no answer could be produced (the LLM was unreachable, timed out, or replied with nothing
    usable: one line on stderr names the step and the endpoint), 2 a bad question, config or index."""
    from rich.console import Console

    from ragkit.index.retrieval import check_query

    check_query(args.question)  # before loading any model: a bad question is a usage error
    rag = _engine(args)
    result = rag.ask(args.question)
    trace = result.trace
    errors = Console(stderr=True, soft_wrap=True, highlight=False)
    status = 3 if result.failed or result.exit_reason == "pipeline_error" else 0
    note = _empty_note(rag, result)
    if args.json:
        print(json.dumps({
            "question": result.question, "answer": result.answer, "confidence": result.confidence, "symbol": result.symbol,
            "route": result.route, "exit_reason": result.exit_reason, "declined": result.declined, "corrections": result.corrections,
            "p_lacks_answer": result.p_lacks_answer, "failed": result.failed, "failed_steps": result.failed_steps, "note": note,
            "error": result.error, "warnings": result.warnings, "answer_mode": result.answer_mode, "evidence": result.evidence,
            "sources": [{"source": d.meta.get("source"), "page": d.meta.get("page"), "section": d.meta.get("section"), "score": d.score} for d in result.sources],
            "seconds": result.seconds, "timings_s": {s.name: round(s.seconds, 4) for s in trace.steps},
            "usage": {"llm_calls": trace.llm_calls, "prompt_tokens": trace.prompt_tokens, "prompt_tokens_reused": trace.prompt_tokens_reused, "completion_tokens": trace.completion_tokens},
            "parts": result.details.get("parts"),
            "trace": trace.table(),
        }, indent=1, default=str))
        _report_failures(errors, result, status)
        return status
    from rich.text import Text

    from ragkit.ui.terminal import answer_block, facts_line, plain, sources_block, trace_caption, trace_table

    console.print(Text.assemble(("Q: ", "bold"), plain(result.question)))
    console.print(answer_block(result))
    evidence = result.evidence
    if evidence:
        text = result.sources[evidence["source"] - 1].content or ""
        before, span, after = (text[evidence["sentence_start"]:evidence["start"]], text[evidence["start"]:evidence["end"]], text[evidence["end"]:evidence["sentence_end"]])
        how = "copied from" if result.answer_mode == "grounded" else "found verbatim in"
        console.print(Text.assemble((f"Evidence ({how} source {evidence['source']}): ", "dim"), plain(before), (plain(span), "bold reverse"), plain(after)))
    if note:
        console.print(Text(f"({note})", style="dim"))
    console.print(facts_line(result))
    if result.sources:
        console.print(Text("Sources", style="bold"))
        console.print(sources_block(result))
    console.print(trace_table(trace, wide=args.wide))
    console.print(trace_caption(trace))
    _report_failures(errors, result, status)
    return status


def _report_failures(errors, result, status: int) -> None:
    if status:
        errors.print(f"[bold red]error:[/] no answer: {shown(result.error or result.exit_reason)}")
        return
    for step in result.failed_steps:
        errors.print(f"[yellow]warning:[/] step {shown(step)} failed, confidence capped: {shown(_step_error(result, step))}")
    for warning in result.warnings:
        errors.print(f"[yellow]warning:[/] {shown(warning)}")


def _empty_note(rag, result) -> str:
    """Why there was nothing to answer from, when there was nothing."""
    if "retrieve" in result.failed_steps:
        return "retrieval failed (see the trace)"
    if result.exit_reason != "no_context":
        return ""
    try:
        return "the index is empty" if not rag.index else "no document matched the question"
    except IndexError_:  # the store went away after the question
        return "the index could not be read"


def _step_error(result, name: str) -> str:
    step = result.trace.step(name)
    return (step.error or (step.fallbacks[0] if step.fallbacks else "")) if step else ""


def cmd_chat(args, console) -> int:
    """A terminal conversation (ragkit.ui.chat_cli): follow-ups, clarification, streaming, sessions on disk."""
    from dataclasses import replace

    from ragkit.conversation.session import ChatSession, chat_features
    from ragkit.ui.chat_cli import ChatLoop

    features = chat_features(_features(args))
    features = replace(features, follow_ups=not args.no_follow_ups, clarify=not args.no_clarify)
    if args.follow_up_backend:
        features.follow_up_backend = args.follow_up_backend
    session = ChatSession(args.session, index_dir=args.index_dir, features=features.validate(), config=_config(args), path=args.sessions_file)
    return ChatLoop(session, console).run()


def cmd_pipeline(args, console) -> int:
    """The graph the given features compile to, as Mermaid text (drawn offline by JupyterLab, GitHub, mermaid-cli)."""
    from ragkit.pipeline.drawing import draw

    text = draw(_features(args), _config(args), detail=args.detail)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
        console.print(f"wrote {args.output}")
    else:
        print(text)
    return 0


def cmd_export(args, console) -> int:
    """Haystack YAML of the graph; `Pipeline.loads(text, allowed_modules=["ragkit.*"])` restores it."""
    from ragkit.pipeline.export import export_yaml

    text = export_yaml(_features(args), args.index_dir, _config(args))
    Path(args.output).write_text(text, encoding="utf-8")
    console.print(f"wrote {args.output} ({len(text.splitlines())} lines); run it with ragkit.pipeline.export.run_exported or serve it with `ragkit serve {args.output}`")
    return 0


def cmd_info(args, console) -> int:
    from ragkit.index.stores import index_exists, load_index
    from ragkit.llm.models import EMBEDDED_LLMS

    config = _config(args)
    console.print(f"embedder: {config.models.embedder}; LLM: {config.models.llm} via {config.models.llm_backend}")
    for name, spec in EMBEDDED_LLMS.items():
        console.print(f"  embedded LLM {name}: {spec.description}")
    where = index_location(args, config)
    if index_exists(where):
        index = load_index(where)
        console.print(f"index {shown(getattr(index, 'location', None) or where)}: {len(index)} chunks from {len(index.sources)} sources, embedder {index.embedder}")
        counts = index.collection_counts()
        sources_in: dict[str, int] = {}
        for info in index.sources.values():
            sources_in[info.collection] = sources_in.get(info.collection, 0) + 1
        console.print(f"collections ({len(counts)}):")
        for name in sorted(counts):
            described = f": {shown(index.collections.get(name))}" if index.collections.get(name) else " (no description)"
            console.print(f"  {name} — {counts[name]} chunks from {sources_in.get(name, 0)} sources{described}")
        for source, info in sorted(index.sources.items()):
            console.print(f"  {shown(source)}: {info.chunks} chunks, collection {info.collection}")
    else:
        console.print(f"no index at {shown(where)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--index-dir", default=DEFAULT_INDEX_DIR, help=f"index folder (default {DEFAULT_INDEX_DIR})")
    common.add_argument("--config", help="YAML file with ragkit settings (see README)")
    common.add_argument("--store", metavar="URL", help="keep the index on a server instead of --index-dir: postgresql://user@host:port/db?table=NAME "
                        "or milvus://host:port?collection=NAME (password: PGPASSWORD / MILVUS_TOKEN); also RAGKIT_STORE")
    parser = argparse.ArgumentParser(prog="ragkit", description="Index documents and ask questions about them, offline.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("index", parents=[common], help="add a file or folder (.md .txt .rst .pdf .html) to the index; `index migrate --to URL` copies it to a store")
    p.add_argument("path", help="file or folder to index; or `migrate` with --to")
    p.add_argument("--to", metavar="URL", help="with `migrate`: copy the local index (--index-dir) into this store without re-embedding")
    p.add_argument("--rebuild", action="store_true", help="start a new index instead of updating")
    p.add_argument("--remove-missing", action="store_true", help="drop indexed sources under PATH whose files are gone")
    p.add_argument("--dry-run", action="store_true", help="report what would be indexed and removed; change nothing")
    p.add_argument("--lock-timeout", type=float, default=None, metavar="SECONDS",
                   help="wait this long for another `ragkit index` run on the same index (default 600)")
    p.add_argument("--hierarchical", action="store_true", help="parent/child chunks (small to find, large to answer)")
    p.add_argument("--collection", metavar="NAME",
                   help="put the files of PATH in this collection (a short slug: wiki, python-docs); default: new files go to 'default', indexed ones stay")
    p.add_argument("--description", metavar="TEXT",
                   help="what the collection holds, in a sentence; questions are routed to collections by it (replaces an earlier one)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("ask", parents=[common], help="answer a question from the index, with sources and per-stage latency")
    p.add_argument("question")
    p.add_argument("--top-k", type=int)
    p.add_argument("--mode", choices=["dense", "sparse", "hybrid"])
    p.add_argument("--llm", help="embedded model name (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b) or a .gguf path")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--wide", action="store_true", help="also show each step's prompt, reused and generated tokens in the trace")
    _feature_args(p)
    p.set_defaults(func=cmd_ask)

    p = sub.add_parser("chat", parents=[common], help="a conversation with the documents: follow-ups, clarification, streaming; sessions kept on disk")
    p.add_argument("--session", default="default", help="the session to continue or start (default: default)")
    p.add_argument("--sessions-file", help="the SQLite file sessions live in (default: sessions.sqlite in $RAGKIT_DATA or ~/.local/share/ragkit)")
    p.add_argument("--llm", help="embedded model name (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b) or a .gguf path")
    p.add_argument("--no-follow-ups", action="store_true", help="answer every question alone (no rewrite with the history)")
    p.add_argument("--no-clarify", action="store_true", help="never ask back, even when the evidence reads the question several ways")
    p.add_argument("--follow-up-backend", choices=["llm", "rules"], help="how a follow-up is rewritten (default: the Features default)")
    _feature_args(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("pipeline", parents=[common], help="print (or write) the graph a Features config compiles to, as Mermaid text")
    _feature_args(p)
    p.add_argument("-o", "--output", help="write the Mermaid text to this file")
    p.add_argument("--detail", action="store_true", help="also draw the steps inside the self-correction loop and every socket")
    p.set_defaults(func=cmd_pipeline)

    p = sub.add_parser("export", parents=[common], help="write the graph as Haystack pipeline YAML (Pipeline.loads restores it)")
    _feature_args(p)
    p.add_argument("--llm", help="embedded model name or a .gguf path")
    p.add_argument("-o", "--output", required=True, help="YAML file to write")
    p.set_defaults(func=cmd_export)

    add_serve_commands(sub, common)  # serve, llm-server

    p = sub.add_parser("info", parents=[common], help="show the configured models and what the index holds")
    p.set_defaults(func=cmd_info)
    add_eval_commands(sub, common)  # testset, eval, report, tune, strategies
    add_agreement_command(sub, common)
    return parser


def _feature_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--features", help="YAML file of Features (routing, hyde, rerank, grading, ...); default: plain RAG")
    p.add_argument("--all-features", action="store_true", help="every agentic feature on (Features.all_on())")
    p.add_argument("--decompose", action="store_true", help="planning: split a question that asks several things and answer each part")
    p.add_argument("--collection", action="append", metavar="NAME", help="search only this collection (repeat for several; overrides the selector)")
    p.add_argument("--select-collections", choices=["embedding", "llm"], help="search the collections whose descriptions fit the question")
    p.add_argument("--fallback", action="store_true", help="when the evidence looks insufficient, try the other retrieval modes (traced)")
    p.add_argument("--answer-mode", choices=["auto", "grounded", "free"],
                   help="grounded: a span copied from a source; free: text with citations; auto (default): grounded for fact lookups")
    if not any(a.dest == "top_k" for a in p._actions):
        p.add_argument("--top-k", type=int)
        p.add_argument("--mode", choices=["dense", "sparse", "hybrid"])


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from ragkit.index.store import IndexError_
    from ragkit.index.ingest import IngestError
    from ragkit.llm.models import MissingModelError
    from ragkit.llm.server import LlamaServerError
    from ragkit.index.retrieval import QueryError

    args = build_parser().parse_args(argv)
    quiet_model_loading()
    console = Console(stderr=False)
    try:
        return args.func(args, console)
    except (IndexError_, IngestError, LlamaServerError, MissingModelError, QueryError, ValueError) as exc:
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {shown(exc)}")
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C: one line, the shell's code for SIGINT, no traceback
        said = f": {exc}" if isinstance(exc, Interrupted) else ""
        Console(stderr=True, soft_wrap=True).print(f"interrupted{shown(said)}", highlight=False)
        _forget_interrupt_seen_in_c_code()
        return 130


if __name__ == "__main__":
    sys.exit(main())
