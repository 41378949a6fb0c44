"""Several processes on one stage: ``accelerate launch --num_processes N``
(torch.distributed: NCCL on GPUs, gloo on the CPU; several machines through
an accelerate config).

The annotation stages split their work by shard: shard ``g`` (a fixed group of
``shard_size`` documents or upstream records) belongs to rank ``g mod N``.
Shard files are named by that global index, so the records of an N-process
run read in shard order are those of a one-process run, and a run
interrupted with N processes resumes with any other number: each rank skips
the shards already on disk. The main process prepares the stage folder
before any rank writes, and writes the manifest after every rank has
finished (a barrier on each side).
"""

from __future__ import annotations

import os
from functools import cache


def use_cpu() -> bool:
    """Whether accelerate must run on the CPU: asked for (``accelerate launch
    --cpu``), or several processes were launched on a machine without CUDA
    (``accelerate launch --multi_gpu`` or ``torchrun`` there), which accelerate
    then only joins into one process group (gloo) when told ``cpu``."""
    import torch
    from accelerate.utils import parse_flag_from_env

    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    return parse_flag_from_env("ACCELERATE_USE_CPU") or (launched and not torch.cuda.is_available())


class Ranks:
    """This process's place in the launch (a single process is rank 0 of 1)."""

    def __init__(self, launched: bool | None = None) -> None:
        self.state = None
        self.rank, self.world, self.local_rank, self.local_world = 0, 1, 0, 1
        if launched is None:
            launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
        if launched:
            from accelerate import PartialState

            self.state = PartialState(cpu=use_cpu())
            self.rank, self.world = self.state.process_index, self.state.num_processes
            self.local_rank = self.state.local_process_index
            self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", self.world))  # processes on this machine

    @classmethod
    def single(cls) -> Ranks:
        """Rank 0 of 1, whatever the launch (for work only the main process does)."""
        return cls(launched=False)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.state is not None:
            self.state.wait_for_everyone()

    def owns(self, shard: int) -> bool:
        """Whether shard ``shard`` is this rank's work."""
        return shard % self.world == self.rank

    def device(self, name: str) -> str:
        """The device a model of this rank goes to: each rank its own GPU."""
        import torch

        if self.world > 1 and name in ("auto", "cuda") and torch.cuda.is_available():
            return f"cuda:{self.local_rank % torch.cuda.device_count()}"
        return name


@cache
def ranks() -> Ranks:
    """The process's :class:`Ranks`, set up once."""
    return Ranks()
