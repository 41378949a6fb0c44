"""Paths a command reads, checked before it starts.

A path that looks local -- it starts with ``.``, ``/``, ``~`` or ``runs/``, has
more than two parts, ends in a file suffix (``.jsonl``, ...), or its parent
folder exists -- must exist. Anything else
is taken for a hub id (``org/name``), which must answer one request within
``HUB_TIMEOUT_S`` seconds; with ``HF_HUB_OFFLINE`` set it must be in the hub
cache instead. Either failure is a ``FileNotFoundError`` naming the config key
and the path (exit 2), raised before a run folder is touched, instead of half
a minute of download retries and a traceback.
"""

from __future__ import annotations

import functools
from pathlib import Path

HUB_TIMEOUT_S = 3.0  # one request to the hub, no retries: a command that reads a hub id fails after it

# Names with these endings are files, never hub ids.
FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".txt", ".csv", ".gz", ".zst", ".xml", ".yaml")
# Tool -> (field of the tools config with the data it reads, kind).
MODEL_RECORD = "toolformer.json"  # a tuned model folder's record of its tools (toolformer/lm/modelfolder.py)
TOOL_DATA = {"WikiSearch": ("collection", "file"), "QA": ("knowledge", "file"), "MT": ("mt_model", "model")}


def looks_local(path: str) -> bool:
    """A path that cannot be a hub id ``name`` or ``org/name``."""
    parts = path.split("/")
    if path.startswith((".", "/", "~", "runs/")) or len(parts) > 2 or not all(parts):
        return True
    return path.lower().endswith(FILE_SUFFIXES) or (len(parts) == 2 and Path(parts[0]).is_dir())


def is_hub_id(path: str) -> bool:
    """Whether ``path`` names a hub repository: no local file or folder of that name, and shaped as a hub id."""
    return bool(path) and not Path(path).expanduser().exists() and not looks_local(path)


def require(key: str, path: str, kind: str = "file") -> None:
    """``path`` (config key ``key``) exists locally, or is a hub id that answers.

    ``kind``: ``file`` (a local file or folder, never a hub id), ``model`` or
    ``dataset`` (a local path or a hub repository of that type).
    """
    if not path:
        raise ValueError(f"{key}: not set (no {kind} configured)")
    if Path(path).expanduser().exists():
        return
    what = "model folder" if kind == "model" else "path"
    if kind == "file" or looks_local(path):
        raise FileNotFoundError(f"{key}: {what} {path} does not exist")
    check_hub(key, path, kind)


@functools.cache
def check_hub(key: str, repo_id: str, repo_type: str = "model") -> None:
    """Hub id ``repo_id`` answers within HUB_TIMEOUT_S (or, offline, is cached)."""
    from huggingface_hub import constants, get_session, get_token
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError
    from huggingface_hub.utils import hf_raise_for_status

    cached = (Path(constants.HF_HUB_CACHE) / f"{repo_type}s--{repo_id.replace('/', '--')}").is_dir()
    if constants.HF_HUB_OFFLINE:
        if cached:
            return
        raise FileNotFoundError(f"{key}: {repo_id} is not a local path, and HF_HUB_OFFLINE is set but the hub "
                                f"cache ({constants.HF_HUB_CACHE}) has no {repo_type} of that name")
    token = get_token()
    try:
        # One plain request: HfApi's headers would first fetch a registry from the hub (3 s more when it hangs).
        hf_raise_for_status(get_session().get(f"{constants.ENDPOINT}/api/{repo_type}s/{repo_id}",
                                              headers={"authorization": f"Bearer {token}"} if token else {},
                                              timeout=HUB_TIMEOUT_S))
    except RepositoryNotFoundError:
        raise FileNotFoundError(f"{key}: {repo_id} is neither a local path nor a {repo_type} on the hub "
                                "(a private one needs `hf auth login`)") from None
    except HfHubHTTPError:
        return  # it exists (gated, rate limited, ...): loading reports what is wrong
    except Exception as e:  # no connection, DNS failure, timeout
        fix = ("it is in the hub cache: set HF_HUB_OFFLINE=1 to use it" if cached else
               "give a local path, or set HF_HUB_OFFLINE=1 to use the hub cache")
        raise FileNotFoundError(f"{key}: {repo_id} is not a local path and the hub did not answer within "
                                f"{HUB_TIMEOUT_S:.0f} s ({type(e).__name__}: {e}); {fix}") from None


def evaluates_with_config_tools(cfg) -> bool:
    """Whether a row of the evaluate stage calls tools with this config's tools section: a row with tools whose
    model folder has no ``toolformer.json`` (:data:`MODEL_RECORD`; not there yet when ``run`` fine-tunes it first),
    or ``evaluate.tools_from: config``. The other rows read the tools and data their folder records, which the
    stage checks row by row before any work."""
    ev = cfg.evaluate
    tuned = cfg.finetune.output_dir or str(Path(cfg.run_dir) / "model")
    folders = ([tuned] if "toolformer" in ev.rows else []) + [m.path for m in ev.extra_models if m.tools]
    return any(ev.tools_from != "model" or not (Path(f).expanduser() / MODEL_RECORD).is_file() for f in folders)


def reads(cfg, stages: list[str] | tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(config key, path, kind) of every path that ``stages`` read from outside the run folder."""
    s = set(stages)
    out = []
    if s & {"sample", "filter", "finetune", "evaluate"}:
        out += [("model.path", cfg.model.path, "model"), ("model.tokenizer", cfg.model.tokenizer, "model")]
    if "sample" in s:
        out.append(("corpus.path", cfg.corpus.path, "dataset"))
    if "execute" in s or ("evaluate" in s and evaluates_with_config_tools(cfg)):
        out += [(f"tools.{name}", getattr(cfg.tools, name), kind)
                for tool, (name, kind) in TOOL_DATA.items() if tool in cfg.tools.enabled]
    if "build" in s:
        out.append(("build.plain_path", cfg.build.plain_path, "file"))
    if "finetune" in s:
        out.append(("finetune.dataset", cfg.finetune.dataset, "file"))
    if "evaluate" in s:
        out += [(f"evaluate.tasks[{i}].path", t.path, "file") for i, t in enumerate(cfg.evaluate.tasks)]
        out.append(("evaluate.perplexity_path", cfg.evaluate.perplexity_path, "file"))
        out += [(f"evaluate.extra_models[{i}].path", m.path, "model") for i, m in enumerate(cfg.evaluate.extra_models)]
    return [r for r in out if r[1] or r[0] == "model.path"]  # optional paths only when set


def check_reads(cfg, stages: list[str] | tuple[str, ...]) -> None:
    """Every path that ``stages`` read exists (or answers from the hub), and a
    fine-tune never writes over what it reads."""
    for key, path, kind in reads(cfg, stages):
        if key == "corpus.path" and cfg.corpus.format == "hub":
            check_hub(key, path, "dataset")
        else:
            require(key, path, kind)
    if "finetune" in stages:
        from toolformer.rundir.guard import check_finetune_output

        check_finetune_output(cfg)
