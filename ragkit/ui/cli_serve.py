"""``ragkit serve`` (an exported pipeline over HTTP with Hayhooks, its LLM in-process or behind llama-server)
and ``ragkit llm-server`` (the LLM alone behind llama.cpp's OpenAI-compatible server)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from ragkit.ui.cli_common import config_from_args as _config
from ragkit.ui.cli_common import shown
from ragkit.ui.text_safety import visible


def cmd_serve(args, console) -> int:
    from ragkit.pipeline.serve import serve

    return serve(args.pipeline_yaml, host=args.host, port=args.port, llm_server=args.llm_server, parallel=args.parallel)


def cmd_llm_server(args, console) -> int:
    """llama-server in the foreground (this process becomes it); the line to point ragkit at it first."""
    from ragkit.index.servers import free_port
    from ragkit.llm.server import llama_server_command

    config = _config(args)
    model = args.llm or config.models.llm
    port = args.port or free_port()
    command = llama_server_command(model, port, parallel=args.parallel, n_ctx=config.models.n_ctx, threads=config.models.n_threads)
    console.print(f"serving {shown(model)} on http://127.0.0.1:{port}/v1 with {args.parallel} parallel slots (Ctrl-C stops it); "
                  "point ragkit at it with:")
    for line in ("export RAGKIT_LLM_BACKEND=openai", f"export RAGKIT_OPENAI_BASE_URL=http://127.0.0.1:{port}/v1", f"export RAGKIT_LLM={shlex.quote(visible(model))}"):
        console.print(f"  {line}", soft_wrap=True, markup=False, highlight=False)
    sys.stdout.flush()
    os.execv(command[0], command)
    return 0  # pragma: no cover


def add_serve_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", help="serve an exported pipeline YAML over HTTP with Hayhooks (OpenAI-compatible chat endpoint)")
    p.add_argument("pipeline_yaml")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=1416)
    p.add_argument("--llm-server", action="store_true", help="serve the LLM with llama.cpp's llama-server (parallel slots) instead of in-process")
    p.add_argument("--parallel", type=int, default=4, help="with --llm-server: requests the LLM decodes side by side (default 4)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("llm-server", parents=[common], help="run the LLM alone behind llama.cpp's OpenAI-compatible server (foreground)")
    p.add_argument("--llm", help="embedded model name or a .gguf path (default: the configured LLM)")
    p.add_argument("--port", type=int, default=None, help="default: a free port")
    p.add_argument("--parallel", type=int, default=4, help="requests decoded side by side (default 4)")
    p.set_defaults(func=cmd_llm_server)
