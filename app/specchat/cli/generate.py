"""`specchat-cli generate` (one prompt) and `specchat-cli chat` (interactive terminal chat)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from specchat.cli.common import add_cost_curve_option, add_engine_options, engine_from_args
from specchat.cli.prompt_input import (
    PromptTooLongError,
    add_prompt_options,
    chat_messages,
    clean_line,
    fit_prompt,
    note,
    read_prompt,
    read_system,
    tolerant_stdin,
)
from specchat.cli.stopping import Terminated
from specchat.core.decoding.pricing.cost_curve import FLAT, CostCurve, CostCurveError
from specchat.core.engines.curve_policy import CurvePolicy
from specchat.core.engines.local import Engine, Message
from specchat.core.params import GenerationParams, params_from
from specchat.core.reply import Reply
from specchat.core.types import FinishReason, GenerationStats, Mode, TokenEvent
from specchat.core.units import format_count

MODES = [m.value for m in Mode]


def add_commands(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser("generate", help="generate a reply to one prompt and print its stats")
    add_prompt_options(g)  # --prompt TEXT | --prompt - (stdin) | --prompt-file PATH
    g.add_argument("--system", default=None, help="optional system prompt")
    g.add_argument("--mode", default="off", choices=MODES, help="speculation mode")
    _add_sampling_options(g)
    g.add_argument("--json", action="store_true", help="end with one JSON stats object")
    add_cost_curve_option(g)
    add_engine_options(g)
    g.set_defaults(func=cmd_generate)

    c = sub.add_parser("chat", help="interactive chat in the terminal (/mode, /help, /quit)")
    c.add_argument("--mode", default="auto", choices=MODES, help="initial speculation mode")
    c.add_argument("--system", default=None, help="optional system prompt")
    _add_sampling_options(c)
    add_engine_options(c)
    c.set_defaults(func=cmd_chat)


def _add_sampling_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument(
        "--stop", action="append", default=None, metavar="TEXT", help="stop string (repeatable)"
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--k-max", type=int, default=8, help="most tokens drafted per step")
    p.add_argument("--p-min", type=float, default=0.5, help="draft stops below this confidence")


def params_from_args(args: argparse.Namespace) -> GenerationParams:
    return params_from(args)


def stats_line(st: GenerationStats, notices: Sequence[str] = ()) -> str:
    parts = [f"mode {st.mode}", format_count(st.tokens, "token"), f"{st.tokens_per_s:.1f} tok/s"]
    parts.append(f"first token {st.ttft_s * 1000:.0f} ms")
    if st.acceptance_rate is not None:
        parts.append(f"accepted {st.accepted}/{st.drafted} ({st.acceptance_rate:.0%})")
        parts.append(f"mean accepted length {st.mean_accepted_length:.2f}")
    elif st.mode != Mode.OFF.value:
        parts.append("nothing drafted")
    host = st.host_ms_per_token
    if host is not None:
        parts.append(f"host {host:.3f} ms/token")
    if st.note:
        parts.append(st.note)
    if st.threads_note:
        parts.append(st.threads_note)
    parts.extend(notices)  # settings the engine had to change (Engine.notices)
    return "[" + ", ".join(parts) + "]"


def _print_text(ev: TokenEvent, out=None) -> None:
    if ev.text:
        out = out or sys.stdout
        out.write(ev.text)
        out.flush()


def stream(events, out=None) -> Reply:
    """Print the reply as it streams; returns the whole reply."""
    return Reply.collect(events, lambda ev: _print_text(ev, out))


def cmd_generate(args: argparse.Namespace) -> int:
    params = params_from_args(args)
    messages: list[Message] = []
    system = read_system(args)
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": read_prompt(args)})
    with engine_from_args(args) as engine:
        notices = tuple(getattr(engine, "notices", ()))
        fit_prompt(engine, messages)  # a prompt longer than the context: an error
        curve = _cost_curve(engine, args)
        reply = stream(engine.generate(messages, params, args.mode))
    print()
    if args.json:
        record = reply.final_stats.to_dict()
        record["finish_reason"] = reply.finish_reason.value if reply.finish_reason else None
        record["notices"] = list(notices)
        record["cost_curve"] = None if curve is None else curve.as_dict()
        print(json.dumps(record))
    else:
        print(stats_line(reply.final_stats, notices), file=sys.stderr)
    if reply.finish_reason is FinishReason.CONTEXT and not reply.final_stats.tokens:
        print(f"specchat-cli: error: no reply: {reply.final_stats.note}", file=sys.stderr)
        return 1
    if reply.finish_reason is FinishReason.ERROR:  # a remote server failed mid-reply
        print("the reply is incomplete: " + reply.final_stats.note, file=sys.stderr)
        return 1
    return 0


def _cost_curve(engine: Engine, args: argparse.Namespace) -> CostCurve | None:
    """Lookup and auto size their drafts with the cost curve: the one kept for this model and
    machine, else measured here first and kept (core/engines/curve_policy.py), or flat. Off
    and draft do not plan, and a server decides for itself."""
    if args.mode not in (Mode.LOOKUP.value, Mode.AUTO.value) or not isinstance(engine, Engine):
        return None
    if args.cost_curve == FLAT:
        curve = CostCurve.flat()
        engine.use_cost_curve(curve)
        return curve
    try:
        return CurvePolicy().now(engine, on_start=note)
    except CostCurveError as exc:
        note(f"{exc}: draft lengths are priced by the engine's online estimate")
        return None


HELP = """commands:
  /mode off|draft|lookup|mtp|auto  switch speculation for the next message (no reload;
                                   mtp: the model's own MTP head or assistant)
  /new                             start a new conversation
  /quit                            leave (Ctrl+D works too)"""


def cmd_chat(args: argparse.Namespace) -> int:
    params = params_from_args(args)
    mode = Mode.parse(args.mode)
    print("loading models…", file=sys.stderr)
    tolerant_stdin()  # invalid UTF-8 typed in the terminal is replaced, not fatal
    with engine_from_args(args) as engine:
        if mode is Mode.DRAFT and not engine.has_draft:
            mode = Mode.LOOKUP
        if mode is Mode.MTP and getattr(engine, "head_name", None) is None:
            note("this model has no MTP head or assistant: speculating with lookup instead")
            mode = Mode.LOOKUP
        history: list[Message] = []
        system = read_system(args)
        if system:
            history.append({"role": "system", "content": system})
        for notice in getattr(engine, "notices", ()):
            note(notice)
        print(f"ready — speculation: {mode.value}. Type /help for commands.", file=sys.stderr)
        while True:
            try:
                typed = input("\nyou> ")
            except EOFError:
                print()
                return 0
            if not typed.strip():
                continue
            cleaned = clean_line(typed)
            line = cleaned.text.strip()
            if cleaned.empty:
                print("not sent: the message is empty: there is nothing to send", file=sys.stderr)
                continue
            if line.startswith("/"):
                mode = _chat_command(line, mode, engine, history, args)
                if mode is None:
                    return 0
                continue
            history.append({"role": "user", "content": line})
            try:
                send = chat_messages(engine, history, params.max_tokens)
            except PromptTooLongError as exc:
                print(f"not sent: {exc}", file=sys.stderr)
                history.pop()
                continue
            print("assistant> ", end="", flush=True)
            try:
                reply = stream(engine.generate(send, params, mode))
            except Terminated:  # SIGTERM ends the chat, not only the reply
                raise
            except KeyboardInterrupt:
                print("\n[stopped]", file=sys.stderr)
                history.pop()
                continue
            history.append({"role": "assistant", "content": reply.text})
            print()
            print(stats_line(reply.final_stats), file=sys.stderr)


def _chat_command(line: str, mode: Mode, engine: Engine, history: list[Message], args):
    cmd, _, arg = line.partition(" ")
    if cmd in ("/quit", "/exit"):
        return None
    if cmd == "/mode":
        try:
            new = Mode.parse(arg)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return mode
        if new is Mode.DRAFT and not engine.has_draft:
            print("no draft model is loaded; staying in", mode.value, file=sys.stderr)
            return mode
        head = getattr(engine, "head_name", None)  # the target's MTP head or assistant
        if new is Mode.MTP and head is None:
            print(
                "this model has no MTP head or assistant (load one with --draft: an mtp-*.gguf "
                "or a Gemma 4 assistant); staying in",
                mode.value,
                file=sys.stderr,
            )
            return mode
        print(
            f"speculation: {new.value}" + (f" ({head})" if new is Mode.MTP else ""), file=sys.stderr
        )
        return new
    if cmd == "/new":
        del history[:]
        if args.system:
            history.append({"role": "system", "content": args.system})
        print("new conversation", file=sys.stderr)
        return mode
    print(HELP, file=sys.stderr)
    return mode
