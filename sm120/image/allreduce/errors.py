"""The sweep's errors: at most three lines on stderr, no traceback, and an exit status that says whose it is."""

from __future__ import annotations

import functools

from sm120.image.entrypoint.errors import one_line  # the image holds both packages (standard library only)

PROG = "allreduce-sweep"


class SweepError(Exception):
    """A request the sweep cannot run. exit_code 2: the user's mistake (an argument, a TP larger than the GPUs);
    1: the machine cannot (no GPU, one GPU, no P2P, the communicator off, a rank that failed)."""

    def __init__(self, message: str, *details: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.lines = [message, *details][:3]
        self.exit_code = exit_code

    def render(self) -> str:
        first, *rest = (one_line(line) for line in self.lines)
        return "".join([f"{PROG}: error: {first}\n", *(f"  {line}\n" for line in rest)])


usage = functools.partial(SweepError, exit_code=2)
machine = functools.partial(SweepError, exit_code=1)
