"""What a model folder may ask for, and what only the user can grant.

A tuned model folder's ``toolformer.json`` (:mod:`toolformer.lm.modelfolder`)
may declare MCP servers, allow side effects and name tool data. The folder is
data, never authority: unless the user trusts it (``--trust-folder-tools``,
``trust_folder_tools=True``, ``evaluate.trust_folder_tools``),

- the MCP servers it declares are not started (a server the user's own config
  declares is the user's and stays usable);
- its ``allow_side_effects`` is not used;
- a data path it records must lie inside the folder: no absolute path, no
  ``..``, no symlink leading out (also inside a data folder or its ``.bm25``
  index, which a tool would write to).

What was left out is said in one line (:meth:`FolderTrust.note`); an enabled
tool that needs it is refused with :class:`FolderTrustError` (exit 2) naming
the flag (:meth:`FolderTrust.enforce`). Trusted, the note lists every command
that will run.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolformer.config.tools import McpServerConfig

TRUST_FLAG = "--trust-folder-tools"


OUTSIDE = "\x00outside the folder:"  # marks an untrusted data path that leaves the folder, until enforce()


class FolderTrustError(ValueError):
    """A model folder asks for what only the user can grant (a process, a side effect, a file outside it)."""


@dataclass
class FolderTrust:
    """What a folder's ``toolformer.json`` asks for beyond its weights and its own files, and whether the
    user trusts it (what that grants: the module's doc)."""

    spec_file: str
    trusted: bool = False
    servers: list[McpServerConfig] = field(default_factory=list)
    """The MCP servers the folder declares."""
    side_effects: bool | list = False
    """Its ``allow_side_effects``."""
    outside: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Tools key -> (the data path the folder names, why it is not inside the folder)."""

    def server_of(self, tool: str) -> McpServerConfig | None:
        """The declared server whose tool is called ``tool``, if any."""
        return next((s for s in self.servers if tool in {s.call_name(t) for t in s.allow}), None)

    def refused(self) -> list[str]:
        """What of the folder's record is not used, one phrase each (empty when trusted)."""
        if self.trusted:
            return []
        out = [f"MCP server {s.name!r} (would run: {server_command(s)})" for s in self.servers]
        if self.side_effects:
            out.append(f"allow_side_effects: {json.dumps(self.side_effects)}")
        out += [f"tools.{key} {path} ({why})" for key, (path, why) in self.outside.items()]
        return out

    def note(self) -> str | None:
        """One line for the user: what was refused (untrusted) or what will run (trusted); None when nothing."""
        if self.trusted:
            runs = [f"MCP server {s.name!r}: {server_command(s)}" for s in self.servers]
            extra = [f"allow_side_effects: {json.dumps(self.side_effects)}"] if self.side_effects else []
            extra += [f"tools.{key} {path} ({why})" for key, (path, why) in self.outside.items()]
            if not runs and not extra:
                return None
            return (f"{self.spec_file}: trusted ({TRUST_FLAG}): " + "; ".join(
                [*(f"starts {r} when one of its tools is used" for r in runs), *extra]))
        refused = self.refused()
        if not refused:
            return None
        return (f"{self.spec_file} asks for what a model folder may not have: {'; '.join(refused)}: not used; a "
                f"model folder starts no process, allows no side effect and reads nothing outside itself unless "
                f"you pass {TRUST_FLAG}")

    def enforce(self, tools_cfg) -> None:
        """Refuse (:class:`FolderTrustError`, exit 2) an enabled tool that needs what the folder may not have:
        a tool of a server it declares (that the user's own config does not provide) or data it records
        outside itself (that the user did not set). Unused outside paths are blanked, never read."""
        if self.trusted:
            return
        from toolformer.tools import known_tools

        known = set(known_tools(tools_cfg))
        for tool in tools_cfg.enabled:
            server = self.server_of(tool)
            if server is not None and tool not in known:
                raise FolderTrustError(
                    f"{self.spec_file}: tools.enabled: {tool!r} is a tool of MCP server {server.name!r}, "
                    f"which the folder declares and which would run `{server_command(server)}`; a model folder "
                    f"starts no process: pass {TRUST_FLAG} to run it, or choose the tools yourself "
                    "(--set tools.enabled=[...], or --disabled)")
        for key, (path, why) in list(self.outside.items()):
            if getattr(tools_cfg, key) != OUTSIDE + path:
                del self.outside[key]  # the user set it: theirs, not the folder's
                continue
            tool = next(t for t, (k, _kind) in tool_data().items() if k == key)
            if tool in tools_cfg.enabled:
                raise FolderTrustError(
                    f"{self.spec_file}: tools.{key}: {path} is {why}; a model folder reads nothing outside itself: "
                    f"pass {TRUST_FLAG} to read it, or set tools.{key}=PATH yourself")
            setattr(tools_cfg, key, "")


def tool_data() -> dict:
    """Tool -> (tools key, kind) of its data (imported late: run.inputs imports the config)."""
    from toolformer.rundir.inputs import TOOL_DATA

    return TOOL_DATA


def server_command(server: McpServerConfig) -> str:
    """A declared MCP server's command line, as a shell would show it."""
    import shlex

    return shlex.join([server.command, *server.args])


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def escape(folder: Path, value: str) -> str | None:
    """Why the data path ``value`` recorded in ``folder`` does not stay inside it (an absolute path, ``..``,
    a symlink leaving it or a hard link, also inside a data folder or its BM25 index); None when it stays. A path
    the system cannot look up (a name too long) raises ValueError."""
    if Path(value).is_absolute() or value.startswith("~"):
        return "an absolute path"
    if ".." in Path(value).parts:
        return "a path with `..`"
    root = folder.resolve()
    path = folder / value
    try:
        for part in (path, path.with_name(path.name + ".bm25")):
            if not (part.exists() or part.is_symlink()):
                continue
            why = _leaves(part, root)
            if why:
                return why
            for dirpath, dirnames, filenames in os.walk(part) if part.is_dir() else ():
                for name in dirnames + filenames:
                    inner = _leaves(Path(dirpath) / name, root)
                    if inner:
                        return f"a folder holding {Path(dirpath) / name}, {inner}"
    except OSError as e:
        raise ValueError(f"{shown(value)}: cannot be looked up ({e.strerror})") from None
    return None


def _leaves(path: Path, root: Path) -> str | None:
    """Why the file or folder ``path`` of a model folder leads out of ``root``: a symlink to a path outside it,
    or a file with more than one name (a hard link: the other may lie outside); None when it does not."""
    if path.is_symlink() and not _within(path.resolve(), root):
        return f"a symlink to {path.resolve()}, outside the folder"
    if not path.exists():
        return None
    st = path.stat()
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        return f"a file with {st.st_nlink} names (a hard link: another may lie outside the folder)"
    return None


def shown(value: str, limit: int = 120) -> str:
    """``value`` for a message: cut to ``limit`` characters, with its length when longer."""
    return value if len(value) <= limit else f"{value[:limit]}… ({len(value):,} characters)"
