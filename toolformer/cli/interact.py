"""``toolformer generate`` and ``toolformer chat``: a tuned model folder from the command line.

Both load the folder with :class:`toolformer.api.ToolformerModel`: the tools,
data, call style and decoding rule of its ``toolformer.json``, under
``--config FILE`` and the ``key=value`` settings after ``--set`` (or ``--``),
which are never read as prompts. Both say which tools and data they use.

``generate`` reads prompts from the arguments, from ``--file`` (one a line,
or JSON Lines with ``prompt`` and optionally ``date``; ``-`` is stdin) or,
with neither, from stdin when it is not a terminal. It prints each
continuation (``--json``: one object a line, with the ``setup`` used) and
the calls on stderr. An argument that reads as a setting
(``tools.knowledge=FILE``) is refused as a prompt: it belongs after ``--set``.
So is text that is not UTF-8 (a byte such as 0xff, a lone surrogate such as
the JSON escape ``"\\ud800"``): an error naming where it is, never replaced;
``chat`` says so and reads the next line.

``chat`` is a prompt loop (rich): each call is shown as it is made (tool,
input, result or error) after the text before it, then the text after it.
``/disabled``, ``/topk N``, ``/calls N``, ``/tokens N`` change the decoding,
``/help`` shows them, ``/quit`` (or end of input) leaves.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
from pathlib import Path
from typing import cast

from toolformer.api import ToolformerModel
from toolformer.config.schema import PipelineConfig
from toolformer.config.text import UTF8_ERROR, decode_utf8
from toolformer.corpus.reader import invalid_text
from toolformer.lm.generate import Generation
from toolformer.lm.modelfolder import setup_line
from toolformer.lm.modeling import model_window, set_threads
from toolformer.rundir import stops
from toolformer.rundir.files import jsonl_records

SECTIONS = {f.name for f in dataclasses.fields(PipelineConfig)}
CHAT_HELP = ("/disabled [on|off]: no calls (toggles); /topk N: call when the call-start token is in the top N; "
             "/calls N: calls per answer; /tokens N: new tokens; /quit: leave")


def looks_like_setting(arg: str) -> bool:
    """``tools.knowledge=FILE``, ``seed=3``: a config key (its first part a config section or field) and a value."""
    key, eq, _ = arg.partition("=")
    return bool(eq) and " " not in key and key.split(".")[0] in SECTIONS


def _text(what: str, value: str, escaped: bool = True) -> str:
    """``value`` when it is valid Unicode text, else ValueError naming ``what``: a byte that is not UTF-8
    (stdin and the arguments arrive with such bytes as lone surrogates) or a lone surrogate (a JSON escape)."""
    why = invalid_text(value, escaped)
    if why is not None:
        raise ValueError(f"{what}: {why}; prompts must be UTF-8 text")
    return value


def _read_utf8(path: str) -> str:
    """The text of the prompt file ``path``; bytes that are not UTF-8 are an error naming the file and line."""
    return decode_utf8(Path(path).read_bytes(), path, UTF8_ERROR + "; prompts must be UTF-8 text")


def read_prompt_file(path: str, stdin=None) -> tuple[list[str], list[str | None]]:
    """(prompts, dates) of a file (``-``: stdin): JSON Lines objects with a
    string ``prompt`` (and ``date``) when the first line is an object, else one
    prompt a line; blank lines are skipped. Text that is not UTF-8, or a lone
    surrogate (``"\\ud800"`` in JSON), is an error naming the file and line."""
    if path == "-":
        text, where = (stdin or sys.stdin).read(), "<stdin>"
    else:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: prompt file not found (--file)")
        text, where = _read_utf8(path), path
    lines = [line.removesuffix("\r") for line in text.split("\n")]  # JSON Lines end at a newline only
    for n, line in enumerate(lines, 1):
        _text(f"{where}:{n}", line)
    first = next((line for line in lines if line.strip()), "")
    prompts: list[str] = []
    dates: list[str | None] = []
    if not first.lstrip().startswith("{"):
        prompts = [line for line in lines if line.strip()]
        return prompts, [None] * len(prompts)
    for n, rec in jsonl_records(lines, where):
        if not isinstance(rec.get("prompt"), str):
            raise ValueError(f"{where}:{n}: expected an object with a string `prompt`")
        if not isinstance(rec.get("date"), (str, type(None))):
            raise ValueError(f"{where}:{n}: `date` must be a string YYYY-MM-DD")
        prompts.append(_text(f"{where}:{n}: `prompt`", rec["prompt"], escaped=False))
        dates.append(rec.get("date") and _text(f"{where}:{n}: `date`", rec["date"], escaped=False))
    return prompts, dates


def collect_prompts(args, stdin=None) -> tuple[list[str], list[str | None]]:
    """The prompts of ``generate``: arguments, then ``--file``; stdin when neither gives one."""
    stdin = stdin or sys.stdin
    for arg in args.prompts:
        if looks_like_setting(arg):
            raise ValueError(f"prompt {arg!r} reads as a setting: put settings after --set (or --), e.g. "
                             f"`toolformer generate --model DIR \"prompt\" --set {arg}`; a prompt that must read "
                             "like this comes from --file or stdin")
    prompts: list[str] = [_text(f"prompt {n} (argument)", p) for n, p in enumerate(args.prompts, 1)]
    dates: list[str | None] = [None] * len(prompts)
    if args.file:
        more, more_dates = read_prompt_file(args.file, stdin)
        prompts, dates = prompts + more, dates + more_dates
    elif not prompts and not stdin.isatty():
        prompts, dates = read_prompt_file("-", stdin)
    if not prompts:
        raise ValueError("no prompt: give prompts as arguments, in a file (--file FILE: one a line, or JSON Lines "
                         "with `prompt`) or on stdin")
    return prompts, dates


def call_summary(call: dict) -> str:
    """``QA(How long is the Ketey?) → 484``, or the error instead of the result."""
    what = call["result"] if call["error"] is None else f"error ({call['error']['code']}): {call['error']['message']}"
    return f"{call['tool'] or '?'}({call['input']}) → {what}"


def load(args, command: str, warn) -> ToolformerModel:
    """The model folder of ``--model`` with ``--config`` and the settings after ``--set``."""
    tools: list[str] | None = [] if args.disabled and command == "generate" else None  # chat may turn calls on again
    tf = ToolformerModel.from_pretrained(args.model, config=args.config, overrides=args.overrides, tools=tools,
                                         warn=warn, trust_folder_tools=args.trust_folder_tools)
    set_threads(tf.config.model.threads)
    return tf


def decoding(tf: ToolformerModel, args) -> dict:
    """The decoding options: the command line's, else the folder's (or the config's)."""
    ev = tf.config.evaluate
    return {**{k: getattr(ev, k) if getattr(args, k) is None else getattr(args, k)
               for k in ("max_new_tokens", "top_k_trigger", "max_calls")},
            "constrained": bool(getattr(args, "constrained", False) or ev.constrained)}


def decoding_text(options: dict) -> str:
    return (f"a call starts when the call-start token is in the top {options['top_k_trigger']}, at most "
            f"{options['max_calls']} call(s), {options['max_new_tokens']} new tokens"
            + (", calls constrained to the tools' grammars" if options.get("constrained") else ""))


def cli_generate(args) -> int:
    """``toolformer generate --model DIR PROMPT... [--file F] [--set KEY=VALUE...]``."""
    prompts, dates = collect_prompts(args)
    tf = load(args, "generate", lambda m: print(f"generate: warning: {m}", file=sys.stderr))
    options = decoding(tf, args)
    setup = {**tf.setup(args.disabled), "decoding": options}
    print(f"generate: {setup_line(setup)}; {decoding_text(options)}", file=sys.stderr)
    with tf:  # stops the MCP servers of MCP tools when done
        gens = cast(list[Generation], tf.generate(prompts, dates=dates, disabled=args.disabled,
                                                  do_sample=args.sample, **options))
    window = model_window(tf.model, tf.config.model)
    for n, g in enumerate(gens, 1):
        if g.prompt_tokens_cut:
            print(f"generate: prompt {n}: its first {g.prompt_tokens_cut} token(s) were cut: the model window of "
                  f"{window} tokens leaves room for {options['max_new_tokens']} new tokens and the call results",
                  file=sys.stderr)
        if args.json:
            print(json.dumps({**dataclasses.asdict(g), "setup": setup}, ensure_ascii=False))
        else:
            print(g.prompt + g.text)
            for c in g.calls:
                print(f"  call {call_summary(c)}", file=sys.stderr)
    return 0


class _Shown:
    """How much of an answer's text is on screen; a call's own text is shown as its line, not again."""

    def __init__(self, end: str):
        self.end = end
        self.upto = 0
        self.in_call = False

    def new_text(self, text: str) -> str:
        """The part of ``text`` (the answer so far) not yet shown, past the call being made."""
        if self.in_call:
            cut = text.find(self.end, self.upto)
            self.upto = len(text) if cut == -1 else cut + len(self.end)
            self.in_call = False
        piece, self.upto = text[self.upto:], max(self.upto, len(text))
        return piece


def _answer(tf: ToolformerModel, console, prompt: str, opts: dict) -> None:
    """Generate for one prompt, showing each call as it is made between the text around it."""
    from rich.text import Text

    shown = _Shown(tf.style.end)

    def show(text: str) -> None:
        piece = shown.new_text(text)
        if piece.strip():
            console.print(Text(piece))

    def on_call(_index: int, call: dict, before: str) -> None:
        show(before)
        ok = call["error"] is None
        console.print(Text(f"  call {call_summary(call)}", style="bold green" if ok else "bold red"))
        shown.in_call = True

    g = cast(Generation, tf.generate(prompt, on_call=on_call, **opts))
    show(g.text)
    if g.calls:
        console.print(Text(f"  without calls: {g.text_without_calls.strip()}", style="dim"))


def _command(line: str, opts: dict, console, tf: ToolformerModel) -> bool:
    """Apply a /command; False for /quit."""
    name, _, arg = line.partition(" ")
    arg = arg.strip()
    keys = {"/topk": "top_k_trigger", "/calls": "max_calls", "/tokens": "max_new_tokens"}
    if name in ("/quit", "/exit", "/q"):
        return False
    if name == "/disabled":
        opts["disabled"] = not opts["disabled"] if not arg else arg.lower() in ("on", "yes", "true", "1")
        state = "disabled: no call is made" if opts["disabled"] or not tf.tools else "enabled"
        console.print(f"tools {state}")
    elif name in keys:
        if not arg.isdigit():
            console.print(f"{name} takes a whole number, e.g. {name} {opts[keys[name]]}")
        else:
            opts[keys[name]] = int(arg)
            console.print(f"{keys[name]} = {arg}")
    elif name == "/help":
        console.print(CHAT_HELP)
        console.print(f"now: {'tools disabled' if opts['disabled'] else 'tools enabled'}; {decoding_text(opts)}")
    else:
        console.print(f"unknown command {name}; {CHAT_HELP}")
    return True


def chat_loop(tf: ToolformerModel, console, opts: dict) -> int:
    """Read prompts and /commands until /quit or the end of input."""
    from rich.text import Text

    console.print(Text(setup_line(tf.setup(opts["disabled"]))))
    console.print(Text(f"{decoding_text(opts)}. {CHAT_HELP}", style="dim"))
    while True:
        try:
            line = console.input("› ")
        except (EOFError, KeyboardInterrupt, stops.Stopped):
            console.print()
            return 0
        why = invalid_text(line, escaped=True)
        if why is not None:  # nothing of it is shown or sent to the model
            console.print(Text(f"that line was not read: {why}; type it again", style="yellow"))
            continue
        if not sys.stdin.isatty():
            console.print(line)  # a transcript of piped input shows what was asked
        line = line.strip()
        if not line:
            continue
        if line.startswith("/"):
            if not _command(line, opts, console, tf):
                return 0
            continue
        try:
            _answer(tf, console, line, opts)
        except (KeyboardInterrupt, stops.Stopped) as e:
            if isinstance(e, stops.Stopped) and e.signum != signal.SIGINT:
                raise
            stops.forget()
            console.print(Text("(stopped)", style="dim"))


def cli_chat(args) -> int:
    """``toolformer chat --model DIR [--set KEY=VALUE...]``."""
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=True, markup=False)
    tf = load(args, "chat", lambda m: console.print(Text(f"warning: {m}", style="yellow")))
    with tf:
        return chat_loop(tf, console, {"disabled": args.disabled, **decoding(tf, args)})
