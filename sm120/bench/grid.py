"""`--spec-grid`: the EAGLE-3 settings (steps, top-k, draft tokens) to sweep, and the best point found.

SGLang's own rules (0.5.9 server_args.py and speculative/eagle_utils.py) decide which points exist:
- with top-k 1 SGLang sets draft tokens to steps + 1 whatever is asked, so such points collapse into one;
- the draft tree holds top-k + (steps - 1) * top-k^2 candidates and SGLang picks draft tokens - 1 of them
  (torch.topk), so more draft tokens than that cannot run.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, astuple, dataclass
from typing import Any

from sm120.errors import UsageError
from sm120.image.entrypoint.assemble import TREE_OPTIONS
from sm120.image.entrypoint.spec import draft_tree_most

# Defaults of the sweep: the track's preset point (build.toml [tracks."X".presets.eagle3], where it sets one) is
# always added, and so is upstream's suggestion for Kimi K2.5 (steps 3, top-k 1, draft tokens 4).
DEFAULT_STEPS = (2, 3)
DEFAULT_TOPK = (1, 4)
DEFAULT_DRAFT = (8, 16)
UPSTREAM_SUGGESTION = (3, 1, 4)
Ints = tuple[int, ...]  # the values of one setting: --grid-steps, --grid-topk or --grid-draft


@dataclass(frozen=True, order=True)
class Point:
    steps: int
    topk: int
    draft: int

    @property
    def label(self) -> str:
        return f"eagle3-s{self.steps}-k{self.topk}-d{self.draft}"

    def env(self) -> dict[str, str]:
        """The image entrypoint's variables for this point (TREE_OPTIONS' are steps, top-k, draft tokens in turn)."""
        return dict(zip(TREE_OPTIONS.values(), map(str, astuple(self)), strict=True))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


def canonical(steps: int, topk: int, draft: int) -> Point | None:
    """The point SGLang would actually run for these settings, or None when it cannot run."""
    if steps < 1 or topk < 1 or draft < 2:
        return None
    draft = steps + 1 if topk == 1 else draft
    return Point(steps, topk, draft) if draft <= draft_tree_most(steps, topk) else None


def parse_list(text: str, flag: str) -> Ints:
    parts = [v.strip() for v in text.split(",") if v.strip()]
    if not parts or not all(re.fullmatch(r"0*[1-9][0-9]{0,3}", v) and len(v) <= 4 for v in parts):
        raise UsageError(f"{flag} {text!r}: give positive integers separated by commas, e.g. 2,3")
    return tuple(int(v) for v in parts)


def points(steps: Ints, topk: Ints, draft: Ints, reference: tuple[int, int, int] | None) -> list[Point]:
    settings = [*itertools.product(steps, topk, draft), *([reference] if reference else []), UPSTREAM_SUGGESTION]
    out = {p for p in itertools.starmap(canonical, settings) if p}
    if not out:
        raise UsageError(
            "--spec-grid: no runnable EAGLE-3 settings in the grid (see --grid-steps/--grid-topk/--grid-draft)"
        )
    return sorted(out)


def best(summaries: dict[str, dict[str, Any]], grid: list[Point], figure: str) -> Point | None:
    scored = [(summaries[p.label][figure]["mean"], p) for p in grid if figure in summaries.get(p.label, {})]
    return max(scored, key=lambda sp: sp[0])[1] if scored else None
