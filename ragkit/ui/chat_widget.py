"""``ChatWidget``: a :class:`~ragkit.conversation.session.ChatSession` as a chat in a notebook.

A message list (each exchange: your message; the reply with ● ◐ ○ and the chance it is right, its
time, the first sources as short cited lines, and "↳ read as: …" when a follow-up was rewritten), a
text box with Send (Enter sends too). While a question runs, the step now running is shown under
the list and the answer streams into the last message (redrawn at most every 50 ms, so the browser
keeps up with the tokens). A question asked back shows one button per option; a click sends that
option's ordinal ("the second", as a person would type it, or "2"), which the session resolves by
rules, without the LLM.

A new widget on a session shows the session's earlier exchanges and a pending question: after a
kernel restart, the same session name and file bring the conversation back.

The HTML is built by pure functions (:func:`render_exchange`, :func:`render_reply`,
:func:`render_streaming`), so tests check what a person reads without a browser; the widget only
places them. Layout: widths are percentages and text wraps, so it fits a laptop-width JupyterLab.

Usage (in Jupyter)::

    from ragkit.conversation.session import ChatSession
    from ragkit.ui.chat_widget import ChatWidget, exchange_timings
    chat = ChatWidget(ChatSession("tesla", index_dir=".ragkit/index"))
    chat                                      # displays; type, press Enter
    reply = chat.send("Where was Nikola Tesla born?")     # what Send does, from code
    exchange_timings(chat.session.exchanges())            # first token and total seconds per exchange
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Iterable

import ipywidgets as widgets

from ragkit.components.confidence import symbol as confidence_symbol
from ragkit.conversation.session import ChatReply, ChatSession
from ragkit.conversation.store import Exchange
from ragkit.ui import plots
from ragkit.ui.terminal import source_where
from ragkit.ui.text_safety import html_text

STREAM_EVERY_S = 0.05  # the streamed answer is redrawn at most this often
SOURCES_SHOWN = 3
ORDINAL_REPLIES = ("the first", "the second", "the third", "the fourth")  # what an option button sends (resolve_reply's ordinals)
MAX_SHOWN = 30  # earlier exchanges shown when a widget opens (the session keeps them all)
_COLORS = {"●": plots.HIGH_COLOR, "◐": plots.MID_COLOR, "○": plots.LOW_COLOR}
_WRAP = "line-height:1.45;white-space:pre-line;overflow-wrap:anywhere;word-break:break-word"
_BUBBLE = f"{_WRAP};margin:2px 0;padding:6px 10px;border-radius:6px;max-width:100%;box-sizing:border-box"
_DIM = "color:#666;font-size:0.9em"


def _esc(text: Any) -> str:
    return html_text(str(text if text is not None else ""))


def render_user(message: str) -> str:
    """Your message, as the list shows it."""
    return f"<div style='{_BUBBLE};background:#e8f0fe'><b>you</b> {_esc(message)}</div>"


def confidence_html(confidence: float | None, symbol: str | None = None) -> str:
    """``● 0.73 chance the answer is right``, the symbol coloured by its band."""
    if confidence is None:
        return ""
    mark = symbol if symbol in _COLORS else confidence_symbol(confidence)
    return f"<b style='color:{_COLORS[mark]}'>{mark} {confidence:.2f}</b> chance the answer is right"


def _facts(confidence: float | None, symbol: str | None, seconds: float | None, first_token_s: float | None, llm_calls: int | None) -> str:
    parts = [confidence_html(confidence, symbol)]
    if seconds is not None:
        parts.append(plots.format_seconds(seconds))
    if first_token_s is not None:
        parts.append(f"first token {plots.format_seconds(first_token_s)}")
    if llm_calls is not None:
        parts.append(f"{llm_calls} LLM call{'' if llm_calls == 1 else 's'}")
    return f"<div style='{_DIM}'>{' · '.join(p for p in parts if p)}</div>"


def _sources(lines: list[str], more: int) -> str:
    if not lines:
        return ""
    extra = f"<div style='{_DIM}'>+ {more} more</div>" if more > 0 else ""
    return f"<div style='{_DIM};{_WRAP}'>" + "<br>".join(lines) + f"</div>{extra}"


def _read_as(asked_as: str | None, note: str | None) -> str:
    out = f"<div style='{_DIM};font-style:italic;{_WRAP}'>↳ read as: {_esc(asked_as)}</div>" if asked_as else ""
    return out + (f"<div style='{_DIM};{_WRAP}'>({_esc(note)})</div>" if note else "")


def _options(options: list[dict]) -> str:
    listed = "<br>".join(f"{i}) {_esc(o.get('label'))}" for i, o in enumerate(options, 1))
    return f"<div style='{_WRAP}'>{listed}</div><div style='{_DIM}'>click one, or reply with words from one (“the second”, “Tesla”, “both”)</div>"


def _ragkit(body: str, kind: str = "answer") -> str:
    colour = {"answer": "#f3f7f1", "clarification": "#f6effa", "invalid": "#fff8e1", "failed": "#fdecee"}.get(kind, "#f5f5f5")
    return f"<div style='{_BUBBLE};background:{colour}'><b>ragkit</b> {body}</div>"


def render_reply(reply: ChatReply) -> str:
    """A reply as the list shows it: the rewrite, the answer (or the question back, with its options),
    the confidence and what it cost, and the first sources as short cited lines."""
    head = _read_as(reply.asked_as, reply.note)
    if reply.kind == "clarification":
        return head + _ragkit(f"Which one do you mean?{_options(reply.options)}", "clarification")
    if reply.kind == "invalid":
        return head + _ragkit(_esc(reply.text), "invalid")
    result = reply.result
    body = _esc(reply.text)
    if result is not None:
        body += _facts(result.confidence if reply.kind == "answer" else None, result.symbol, result.seconds, result.first_token_s, result.trace.llm_calls)
        lines = []
        for i, doc in enumerate(result.sources[:SOURCES_SHOWN], 1):
            where = source_where(doc)
            score = f" · {doc.score:.2f}" if doc.score is not None else ""
            lines.append(f"[{i}] {_esc(doc.meta.get('source') or doc.id)}{' · ' + _esc(where) if where else ''}{score}")
        body += _sources(lines, len(result.sources) - SOURCES_SHOWN)
        if reply.kind == "failed" and result.error:
            body += f"<div style='color:{plots.LOW_COLOR}'>error: {_esc(result.error)}</div>"
    return head + _ragkit(body, reply.kind)


_STATUS_NOTES = {"incomplete": "stopped while it streamed; the partial answer is kept", "answering": "no answer recorded (still running, or the process ended)"}


def render_exchange(exchange: Exchange) -> str:
    """A stored exchange (the session file's row): what :func:`render_user` + :func:`render_reply`
    showed when it was answered, read back after a restart or from another process."""
    meta = exchange.meta or {}
    out = render_user(exchange.question) + _read_as(exchange.asked_as, meta.get("note"))
    if exchange.status == "clarification":
        return out + _ragkit(_esc(exchange.reply), "clarification")
    if exchange.status == "invalid":
        return out + _ragkit(_esc(exchange.reply), "invalid")
    body = _esc(exchange.reply) or "<i>—</i>"
    if exchange.status in _STATUS_NOTES:
        body += f"<div style='{_DIM}'>({_STATUS_NOTES[exchange.status]})</div>"
    confidence = exchange.confidence if exchange.status == "complete" else None
    body += _facts(confidence, None, meta.get("seconds"), meta.get("first_token_s"), meta.get("llm_calls"))
    lines = [f"[{i}] {_esc(s.get('source') or s.get('title') or '?')}" + (f" · {s['score']:.2f}" if s.get("score") is not None else "")
             for i, s in enumerate(exchange.sources[:SOURCES_SHOWN], 1)]
    return out + _ragkit(body + _sources(lines, len(exchange.sources) - SOURCES_SHOWN), "failed" if exchange.status == "failed" else "answer")


def render_streaming(message: str, text: str = "", step: str | None = None, read_as: str | None = None) -> str:
    """The exchange under way: your message, the rewrite once known, and the answer so far."""
    body = _esc(text) + "<span style='color:#999'>▍</span>" if text else f"<i style='color:#999'>{_esc(step or 'starting')}…</i>"
    return render_user(message) + _read_as(read_as, None) + _ragkit(body)


def render_status(step: str | None, seconds: float) -> str:
    return f"<span style='{_DIM}'>running <b>{_esc(step or 'starting')}</b>… {seconds:.1f} s</span>" if step else ""


def exchange_timings(exchanges: Iterable[Exchange]) -> list[dict[str, Any]]:
    """One row per exchange that ran the pipeline: its question, how it ended, time to the first
    streamed token and total seconds (from the session file, so rows from earlier runs count too)."""
    rows = []
    for n, e in enumerate(exchanges, 1):
        seconds = (e.meta or {}).get("seconds")
        if seconds is None:
            continue
        first = (e.meta or {}).get("first_token_s")
        rows.append({"#": n, "message": e.question, "status": e.status, "first token s": None if first is None else round(first, 2), "total s": round(seconds, 2)})
    return rows


def timings_figure(rows: list[dict[str, Any]], ax=None, title: str = "time per exchange"):
    """Horizontal bars of each exchange's total seconds, the first streamed token marked on each."""
    fig, ax = plots.axes(ax, figsize=(7, 0.45 * max(len(rows), 2) + 1.2))
    labels = [f"{r['#']}. {r['message'][:38]}{'…' if len(r['message']) > 38 else ''}" for r in rows]
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [r["total s"] for r in rows], color=plots.STEP_COLOR)
    firsts = [(yy, r["first token s"]) for yy, r in zip(y, rows) if r["first token s"] is not None]
    if firsts:
        ax.plot([f for _, f in firsts], [yy for yy, _ in firsts], "|", color=plots.LLM_COLOR, markersize=18, mew=3)
    for yy, r in zip(y, rows):
        ax.text(r["total s"], yy, f" {plots.format_seconds(r['total s'])}", va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("seconds — bar: the whole exchange · red tick: the answer's first streamed token")
    ax.set_xlim(0, max([r["total s"] for r in rows] + [0.1]) * 1.3)  # room for the longest bar's label
    ax.set_title(title)
    return fig


class ChatWidget:
    """The chat: message list, step line, option buttons, text box and Send. See the module."""

    def __init__(self, session: ChatSession, show_last: int = MAX_SHOWN):
        self.session = session
        self.last_reply: ChatReply | None = None
        full = widgets.Layout(width="100%", max_width="100%")
        self.header = widgets.HTML(layout=full)
        self.messages = widgets.VBox(layout=widgets.Layout(width="100%", max_width="100%", overflow="hidden"))
        self.status = widgets.HTML(layout=full)
        self.messages.add_class("ragkit-chat-messages")
        self.status.add_class("ragkit-chat-status")
        self.options = widgets.HBox(layout=widgets.Layout(flex_flow="row wrap", width="100%", grid_gap="6px"))
        self.input = widgets.Text(placeholder="Ask about your documents, then Enter…", continuous_update=True,
                                  layout=widgets.Layout(flex="1 1 auto", width="auto", min_width="0"))
        self.send_button = widgets.Button(description="Send", button_style="primary", layout=widgets.Layout(width="auto", flex="0 0 auto"))
        self.send_button.on_click(lambda _b: self._submit())
        with warnings.catch_warnings():  # ipywidgets 8 calls on_submit deprecated, yet it is the only Enter event a Text sends
            warnings.simplefilter("ignore", DeprecationWarning)
            self.input.on_submit(lambda _t: self._submit())
        self.widget = widgets.VBox(
            [self.header, self.messages, self.status, self.options, widgets.HBox([self.input, self.send_button], layout=widgets.Layout(width="100%", grid_gap="6px"))],
            layout=widgets.Layout(width="100%", max_width="100%", overflow="hidden", padding="4px 0"))
        self.widget.add_class("ragkit-chat")
        self.refresh(show_last)

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    # -- showing the session ------------------------------------------------------------------------
    def refresh(self, show_last: int = MAX_SHOWN) -> None:
        """Redraw from the session file: its exchanges, and the options of a pending question."""
        exchanges = self.session.exchanges()
        shown = exchanges[-show_last:] if show_last else []
        items = [widgets.HTML(render_exchange(e), layout=widgets.Layout(width="100%")) for e in shown]
        if len(exchanges) > len(shown):
            items.insert(0, widgets.HTML(f"<span style='{_DIM}'>{len(exchanges) - len(shown)} earlier exchanges not shown</span>"))
        self.messages.children = tuple(items)
        self._set_header(len(exchanges))
        pending = self.session.pending
        self._show_options(pending["options"] if pending else [])

    def _set_header(self, count: int) -> None:
        notice = f"<div style='color:{plots.LOW_COLOR};{_WRAP}'>{_esc(self.session.notice)}</div>" if self.session.notice else ""
        self.header.value = (f"<div style='{_DIM};{_WRAP}'>session <b>{_esc(self.session.name)}</b> · {count} exchange{'' if count == 1 else 's'}"
                             f" · {_esc(self.session.store.path.name)}</div>{notice}")

    def _show_options(self, options: list[dict]) -> None:
        buttons = []
        for i, option in enumerate(options, 1):
            label = f"{i}) {option.get('label', '')}"
            button = widgets.Button(description=label, tooltip=label, layout=widgets.Layout(width="auto", max_width="100%"))
            button.add_class("ragkit-chat-option")
            reply = ORDINAL_REPLIES[i - 1] if i <= len(ORDINAL_REPLIES) else str(option.get("label", i))
            button.on_click(lambda _b, text=reply: self._submit(text))
            buttons.append(button)
        self.options.children = tuple(buttons)

    def _busy(self, busy: bool) -> None:
        for control in (self.input, self.send_button, *self.options.children):
            control.disabled = busy

    # -- sending ------------------------------------------------------------------------------------
    def _submit(self, message: str | None = None) -> None:
        """Send / Enter / an option button: errors are shown in the list (a click has nowhere to raise to)."""
        if message is None:
            message, self.input.value = self.input.value, ""
        if not message.strip() or self.send_button.disabled:
            return
        try:
            self.send(message)
        except Exception:  # noqa: BLE001 - already shown in the list by send()
            pass

    def send(self, message: str) -> ChatReply:
        """Send ``message`` as the text box does, streaming into the list; returns the session's reply."""
        turn = widgets.HTML(render_streaming(message), layout=widgets.Layout(width="100%"))
        self.messages.children = (*self.messages.children, turn)
        self._show_options([])
        state: dict[str, Any] = {"text": "", "step": None, "read_as": None, "part": None, "drawn": 0.0, "t0": time.perf_counter()}

        def draw(force: bool = False) -> None:
            now = time.perf_counter()
            if force or now - state["drawn"] >= STREAM_EVERY_S:
                state["drawn"] = now
                turn.value = render_streaming(message, state["text"], state["step"], state["read_as"])

        def on_token(chunk: Any) -> None:
            part = (chunk.meta or {}).get("part")
            if chunk.start:
                if part and part != state["part"]:
                    state["part"] = part
                    state["text"] += ("\n" if state["text"] else "") + f"[{part}] "
                elif state["text"]:
                    state["text"] = ""  # a retry: its answer replaces the rejected one
            state["text"] += chunk.content or ""
            draw()

        def on_step(event: str, step: Any) -> None:
            if event == "start":
                state["step"] = step.name
                self.status.value = render_status(step.name, time.perf_counter() - state["t0"])
                draw(force=not state["text"])
            elif step.name == "follow_up" and step.decision.get("rewrite") and str(step.decision.get("verdict", "")).startswith("kept"):
                state["read_as"] = str(step.decision["rewrite"])
                draw(force=True)

        self._busy(True)
        self.status.value = render_status("starting", 0.0)
        try:
            reply = self.session.send(message, on_token=on_token, on_step=on_step)
        except BaseException as exc:
            stopped = isinstance(exc, KeyboardInterrupt)
            why = "stopped; the partial answer is kept in the session, marked incomplete" if stopped else f"{type(exc).__name__}: {exc}"
            turn.value = render_streaming(message, state["text"]) + f"<div style='color:{plots.LOW_COLOR};{_WRAP}'>{_esc(why)}</div>"
            raise
        finally:
            self.status.value = ""
            self._busy(False)
        self.last_reply = reply
        turn.value = render_user(message) + render_reply(reply)
        self._set_header(len(self.session.exchanges()))
        pending = self.session.pending  # still waiting after a refused reply, asked again, or answered
        self._show_options(pending["options"] if pending else [])
        return reply
