"""``ragkit chat``: a conversation with the documents in the terminal, readable at 80 columns.

While a question runs, a spinner names the step now running; the answer streams in under it; when
it is done the same place shows the final answer, ●◐○ with the chance it is right, what it cost,
and the first sources as short cited lines. A follow-up that was rewritten says how it was read
("↳ read as: …"); an ambiguous question is asked back with numbered options, and the next message
answers it ("2", "the second", words of an option).

Commands: ``/trace`` (every step of the last answer; ``/trace wide`` adds token counts), ``/features``
(what is on; ``/features NAME`` flips a toggle, ``/features NAME on|off`` sets it), ``/new [NAME]``,
``/sessions``, ``/session NAME`` (switch), ``/help``, ``/quit`` (or Ctrl-D). Ctrl-C while an answer
streams stops it (the partial answer is kept in the session, marked incomplete); at the prompt it quits.

The session is :class:`~ragkit.conversation.session.ChatSession`'s: ``--session NAME`` continues one
(turns, pending clarification) from the session file, across processes and restarts.

The layout is :mod:`ragkit.ui.terminal`'s (shared with ``ragkit ask``); this module is the loop.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from ragkit.conversation.session import ChatReply, ChatSession
from ragkit.pipeline.trace import Step
from ragkit.ui.cli_common import quiet_model_loading
from ragkit.ui.terminal import facts_line, plain, sources_block, trace_caption, trace_table

SOURCES_SHOWN = 3
HELP = [
    ("/trace [wide]", "every step of the last answer: time, LLM calls, what it decided"),
    ("/features [NAME [on|off]]", "what is on; flip or set a toggle (e.g. /features hyde)"),
    ("/new [NAME]", "start a new session"),
    ("/session NAME", "switch to a session (created if new)"),
    ("/sessions", "the sessions in the session file"),
    ("/help", "this list"),
    ("/quit", "leave (Ctrl-D too)"),
]


class _Turn:
    """What the live region shows while a question runs: the step, the rewrite, the streamed answer."""

    def __init__(self) -> None:
        self.step = "starting"
        self.read_as: str | None = None
        self.text = ""
        self.part: str | None = None
        self.retries = 0
        self.started = time.perf_counter()

    def on_step(self, event: str, step: Step) -> None:
        if event == "start":
            self.step = step.name
        elif step.name == "follow_up" and step.decision.get("rewrite") and str(step.decision.get("verdict", "")).startswith("kept"):
            self.read_as = str(step.decision["rewrite"])

    def on_token(self, chunk: Any) -> None:
        part = (chunk.meta or {}).get("part")
        if chunk.start:
            if part and part != self.part:
                self.part = part
                self.text += ("\n" if self.text else "") + f"[{part}] "
            elif self.text:
                self.retries += 1
                self.text = ""  # a retry: its answer replaces the rejected one
        self.text += chunk.content or ""

    def renderable(self) -> Group:
        items: list[Any] = []
        if self.read_as:
            items.append(Text(f"↳ read as: {plain(self.read_as)}", style="dim italic"))
        if self.text:
            items.append(Text.assemble(("ragkit› ", "bold green"), plain(self.text)))
        note = f"retry {self.retries} · " if self.retries else ""
        items.append(Spinner("dots", text=Text(f"{note}{self.step} · {time.perf_counter() - self.started:.1f} s", style="dim")))
        return Group(*items)


def reply_renderable(reply: ChatReply) -> Group:
    """The final form of a reply: rewrite, answer or question back, confidence and cost, sources."""
    items: list[Any] = []
    if reply.asked_as:
        items.append(Text(f"↳ read as: {plain(reply.asked_as)}", style="dim italic"))
    if reply.note:
        items.append(Text(f"({plain(reply.note)})", style="dim"))
    if reply.kind == "invalid":
        items.append(Text.assemble(("ragkit› ", "bold yellow"), plain(reply.text)))
        return Group(*items)
    if reply.kind == "clarification":
        items.append(Text.assemble(("ragkit› ", "bold magenta"), "Which one do you mean?"))
        for i, option in enumerate(reply.options, 1):
            items.append(Text(f"  {i}) {plain(option['label'])}"))
        items.append(Text("Reply with a number or words from one (“2”, “the second”, “both”).", style="dim"))
        return Group(*items)
    result = reply.result
    style = "bold red" if reply.kind == "failed" else "bold green"
    items.append(Text.assemble(("ragkit› ", style), plain(reply.text)))
    if result is not None:
        items.append(facts_line(result, first_token_s=result.first_token_s))
        if result.sources:
            items.append(sources_block(result, most=SOURCES_SHOWN))
            if len(result.sources) > SOURCES_SHOWN:
                items.append(Text(f"  + {len(result.sources) - SOURCES_SHOWN} more sources · /trace for every step", style="dim"))
        if result.error and reply.kind == "failed":
            items.append(Text(f"error: {plain(result.error)}", style="red"))
    return Group(*items)


def features_text(features) -> Text:
    on = [f.name for f in dataclasses.fields(features) if isinstance(getattr(features, f.name), bool) and getattr(features, f.name)]
    off = [f.name for f in dataclasses.fields(features) if isinstance(getattr(features, f.name), bool) and not getattr(features, f.name)]
    return Text.assemble(("on: ", "bold"), ", ".join(on) or "nothing", "\n", ("off: ", "bold"), ", ".join(off))


class ChatLoop:
    def __init__(self, session: ChatSession, console: Console):
        self.session, self.console = session, console
        self.last: ChatReply | None = None

    def greet(self) -> None:
        c, s = self.console, self.session
        if s.notice:
            c.print(Text(f"warning: {s.notice}", style="yellow"))
        earlier = s.exchanges()
        c.print(Text.assemble(("ragkit chat", "bold"), f" · session {s.name}", f" · {len(earlier)} earlier exchange{'s' if len(earlier) != 1 else ''}" if earlier else "",
                              (" · /help for commands", "dim")))
        for exchange in earlier[-2:]:
            c.print(Text.assemble(("you› ", "bold cyan"), plain(exchange.question)))
            mark = "" if exchange.status == "complete" else f" ({exchange.status})"
            c.print(Text.assemble(("ragkit› ", "dim green"), (plain(exchange.reply[:300]) + mark, "dim")))
        pending = s.pending
        if pending:
            c.print(Text("Still waiting for your choice:", style="magenta"))
            for i, option in enumerate(pending["options"], 1):
                c.print(Text(f"  {i}) {plain(option['label'])}"))

    def command(self, line: str) -> bool:
        """Run a /command; False to quit."""
        c, s = self.console, self.session
        words = line.split()
        name, args = words[0].lower(), words[1:]
        if name in ("/quit", "/exit", "/q"):
            return False
        if name == "/help":
            for usage, what in HELP:
                c.print(Text.assemble((usage, "bold"), "  ", what))
        elif name == "/trace":
            result = self.last.result if self.last is not None else None
            if result is None:
                c.print(Text("no answer yet", style="dim"))
            else:
                c.print(trace_table(result.trace, wide=bool(args and args[0] == "wide")))
                c.print(trace_caption(result.trace))
        elif name == "/features":
            self._features(args)
        elif name == "/new":
            c.print(f"new session {s.new(args[0] if args else None)}")
            self.last = None
        elif name == "/session" and args:
            s.switch(" ".join(args))
            self.last = None
            self.greet()
        elif name == "/sessions":
            for info in s.sessions():
                here = " ← this one" if info.name == s.name else ""
                waiting = " · waiting for a choice" if info.pending else ""
                c.print(Text(f"{info.name} · {info.exchanges} exchanges · {time.strftime('%Y-%m-%d %H:%M', time.localtime(info.updated))}{waiting}{here}"))
        else:
            c.print(Text(f"unknown command {name}; /help lists them", style="yellow"))
        return True

    def _features(self, args: list[str]) -> None:
        c, s = self.console, self.session
        if not args:
            c.print(features_text(s.features))
            return
        field_name = args[0]
        current = getattr(s.features, field_name, None)
        if not isinstance(current, bool):
            c.print(Text(f"{field_name} is not a toggle; /features lists them", style="yellow"))
            return
        value = (not current) if len(args) == 1 else args[1].lower() in ("on", "true", "yes", "1")
        try:
            s.set_features(dataclasses.replace(s.features, **{field_name: value}))
        except ValueError as exc:
            c.print(Text(f"not changed: {exc}", style="yellow"))
            return
        c.print(Text(f"{field_name} {'on' if value else 'off'}", style="bold"))

    def ask(self, message: str) -> None:
        turn = _Turn()
        try:
            # stderr is left alone: a library's progress bar must not be drawn into the live region
            with Live(turn.renderable(), console=self.console, refresh_per_second=8, transient=True, redirect_stderr=False) as live:
                def refresh(*_: Any) -> None:
                    live.update(turn.renderable())

                def on_step(event: str, step: Step) -> None:
                    turn.on_step(event, step)
                    refresh()

                def on_token(chunk: Any) -> None:
                    turn.on_token(chunk)
                    refresh()

                reply = self.session.send(message, on_token=on_token, on_step=on_step)
        except KeyboardInterrupt:
            kept = f": {plain(turn.text[:200])}…" if turn.text else ""
            self.console.print(Text(f"(stopped; the partial answer is kept in the session, marked incomplete{kept})", style="yellow"))
            return
        self.last = reply
        self.console.print(reply_renderable(reply))

    def warm_up(self) -> None:
        """Load the models and the index now, so the first question's time is the question's."""
        from ragkit.ui.ablation import prepare_one_time

        quiet_model_loading()
        with self.console.status("loading the model and the index…", spinner="dots"):
            prepare_one_time(self.session.rag)
            self.session.rag.pipeline.warm_up()

    def run(self) -> int:
        self.warm_up()
        self.greet()
        while True:
            try:
                line = self.console.input(Text("you› ", style="bold cyan")).strip()
            except (EOFError, KeyboardInterrupt):
                self.console.print()
                return 0
            if not line:
                continue
            if line.startswith("/"):
                if not self.command(line):
                    return 0
                continue
            self.ask(line)
