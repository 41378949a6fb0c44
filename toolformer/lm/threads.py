"""How many torch threads to use on a CPU, and following the machine's load.

torch's intra-op threads wait for each other at the end of every operation. When
another process keeps one of the cores busy, the thread that shares its core
runs at a fraction of its speed and every other thread waits for it (spinning,
which takes still more of the core): on 2 cores with one competing process, the
training steps of the demo's model took 3.2× their idle time with 2 threads and
1.8× with the count following the load (``toolformer bench --contention``
measures it per stage).

So with ``model.threads: 0`` (the default) a process that has the machine to
itself starts with one thread per core it may run on, and :class:`LoadFollower`
keeps the count at the cores that other processes leave free: between two
forwards of the model, at most every half second, it reads the busy
time of those cores (``/proc/stat``) and its own CPU time, and sets the thread
count to the cores minus the ones the other processes kept busy (rounded, at
least one). It only ever lowers the count below the cores when another process
runs, so an idle machine is not slowed. A set ``model.threads`` is kept as it
is; so is the split among the processes of a launch (each its share, not
followed). Without ``/proc/stat`` (not Linux) the count stays at the cores.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

PROC_STAT = Path("/proc/stat")
_FOLLOWER: LoadFollower | None = None


def usable_cores() -> list[int]:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def busy_seconds(cpus: list[int], stat: Path = PROC_STAT) -> float | None:
    """Seconds the given CPUs have spent busy since boot (user, nice, system,
    irq, softirq and steal time), or None where ``/proc/stat`` is unreadable."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{c}" for c in cpus}
    ticks = 0
    found = 0
    for line in lines:
        fields = line.split()
        if fields and fields[0] in wanted:
            values = [int(v) for v in fields[1:9]]
            values += [0] * (8 - len(values))
            user, nice, system, _idle, _iowait, irq, softirq, steal = values
            ticks += user + nice + system + irq + softirq + steal
            found += 1
    if not found:
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def threads_for(cores: int, others: float) -> int:
    """Threads for a process on ``cores`` CPUs while other processes keep
    ``others`` of them busy (in cores): the free ones, at least one."""
    return max(1, min(cores, cores - int(others + 0.4)))


class LoadFollower:
    """Sets torch's thread count to the cores other processes leave free;
    :meth:`tick` is called between forwards (a hook on the model)."""

    def __init__(self, cpus: list[int], every: float = 0.5, stat: Path = PROC_STAT,
                 clock=time.monotonic, own_cpu=time.process_time):
        self.cpus, self.every, self.stat = cpus, every, stat
        self.clock, self.own_cpu = clock, own_cpu
        self.threads = len(cpus)
        self.changes = 0
        self._last = self._sample()

    def _sample(self) -> tuple[float, float, float] | None:
        busy = busy_seconds(self.cpus, self.stat)
        return None if busy is None else (self.clock(), busy, self.own_cpu())

    def tick(self) -> int:
        """Look at the load if ``every`` seconds have passed; the thread count."""
        if self._last is None or self.clock() - self._last[0] < self.every:
            return self.threads
        now = self._sample()
        if now is None:
            return self.threads
        wall = now[0] - self._last[0]
        others = max(0.0, (now[1] - self._last[1]) - (now[2] - self._last[2])) / wall
        self._last = now
        want = threads_for(len(self.cpus), others)
        if want != self.threads:
            self.threads = want
            self.changes += 1
            torch.set_num_threads(want)
        return self.threads


def set_threads(threads: int = 0, share: int = 0) -> int:
    """Set torch's CPU threads: ``threads`` when given (kept as it is); else the
    usable cores divided by ``share`` processes (default: the processes of this
    launch on this machine), and, for a process alone on its machine, follow
    the load (:class:`LoadFollower`). Returns the starting count."""
    global _FOLLOWER
    _FOLLOWER = None
    if threads:
        torch.set_num_threads(threads)
        return threads
    if not share:
        from toolformer.rundir.parallel import ranks

        share = ranks().local_world
    cpus = usable_cores()
    count = max(1, len(cpus) // max(1, share))
    torch.set_num_threads(count)
    if share == 1 and count > 1 and busy_seconds(cpus) is not None:
        _FOLLOWER = LoadFollower(cpus)
    return count


def _tick(module, args) -> None:
    if _FOLLOWER is not None:
        _FOLLOWER.tick()


def follow_load(model) -> None:
    """Let ``model``'s forwards keep the thread count at the free cores (a
    no-op while the count is fixed): a hook on its input embeddings, which
    every forward passes (the whole model's, or its body's alone as the
    filter runs it); once per model."""
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else model
    if not getattr(embed, "_toolformer_follows_load", False):
        embed.register_forward_pre_hook(_tick)
        embed._toolformer_follows_load = True
