"""plan.json's `entrypoint` key, in one module for both sides: `sm120.plan` builds an EntrypointSpec from build.toml
and the image's entrypoint decodes plan.json back into the same classes. The runtime rules' conditions are defined
here once: build.toml's schema takes their names from CONDITIONS, the entrypoint their meaning."""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from types import NoneType, UnionType
from typing import Any, TypeVar

# Where the image keeps the plan (the Dockerfile writes it there; tests/unit/test_plan_outputs.py checks that).
PLAN_JSON_PATH = "/etc/sglang-sm120/plan.json"


@dataclass(frozen=True)
class RuleFacts:
    """What a runtime rule's conditions are judged on: the command's effective values and the target model."""

    tp: int
    nnodes: int
    nvfp4: bool | None  # None: the target is not a local directory, so its quantization is unknown


# A rule applies when all its conditions hold; None means "cannot tell" (the rule is then not applied).
CONDITIONS: dict[str, Callable[[RuleFacts], bool | None]] = {
    "always": lambda facts: True,
    # the target is a ModelOpt NVFP4 checkpoint (what SGLang calls modelopt_fp4 / modelopt_mixed)
    "nvfp4": lambda facts: facts.nvfp4,
    "tp>1": lambda facts: facts.tp > 1,  # tensor parallelism over several GPUs
    "single-node": lambda facts: facts.nnodes == 1,
}


class SpecError(ValueError):
    """plan.json does not hold an entrypoint spec; the message names the key."""


def draft_tree_most(steps: int, topk: int) -> int:
    """The most draft tokens an EAGLE draft tree of `steps` and `topk` can verify: its top-k + (steps - 1) * top-k^2
    candidates plus the root (SGLang picks draft tokens - 1 candidates with torch.topk, speculative/eagle_utils.py)."""
    return 1 + topk + (steps - 1) * topk * topk


@dataclass(frozen=True)
class ModeSpec:
    """A serving mode of this track: build.toml [modes.NAME] (summary, args, draft) with the track's
    [tracks."X".presets.NAME] (the draft tree and why; all three numbers None: SGLang chooses the tree)."""

    summary: str
    args: list[str]
    draft: bool  # needs DRAFT_MODEL_PATH, an EAGLE-3 drafter
    spec_num_steps: int | None
    spec_eagle_topk: int | None
    spec_num_draft_tokens: int | None
    draft_tree_reason: str | None  # where the draft tree comes from (None: not a draft mode)

    def __post_init__(self) -> None:
        numbers = {name: getattr(self, name) for name in ("spec_num_steps", "spec_eagle_topk", "spec_num_draft_tokens")}
        for name, value in numbers.items():
            if value is not None and value < 1:
                raise SpecError(f".{name} is {value!r}, not an integer >= 1")
        if None in numbers.values() and set(numbers.values()) != {None}:
            raise SpecError(".spec_num_steps, .spec_eagle_topk and .spec_num_draft_tokens are all set or all null")
        if self.draft and not self.draft_tree_reason:
            raise SpecError(".draft_tree_reason is missing for a draft mode")

    @property
    def draft_tree(self) -> tuple[int, int, int] | None:
        """(steps, top-k, draft tokens) of the presets, or None: SGLang chooses the tree."""
        tree = (self.spec_num_steps, self.spec_eagle_topk, self.spec_num_draft_tokens)
        return None if None in tree else tree  # type: ignore[return-value]

    def describe_draft_tree(self) -> str:
        """One line for --help and --dry-run: which draft tree applies and why."""
        what = "SGLang's own choice (no --speculative-num-steps/-eagle-topk/-num-draft-tokens given)"
        if (tree := self.draft_tree) is not None:
            what = f"steps {tree[0]}, top-k {tree[1]}, draft tokens {tree[2]}"
        return f"{what}: {self.draft_tree_reason}"


@dataclass(frozen=True)
class UpstreamCheckSpec:
    """Upstream has a change when every regex in `patterns` matches the file at `path` (relative to site-packages)."""

    path: str
    patterns: list[str]


@dataclass(frozen=True)
class RequiredPatch:
    """A runtime rule applies only where this patch's change is in the installed SGLang."""

    patch: str
    checks: list[UpstreamCheckSpec]


@dataclass(frozen=True)
class RuntimeRuleSpec:
    name: str
    when: list[str]  # names in CONDITIONS; every one must hold
    env: dict[str, str]
    args: list[str]
    requires: RequiredPatch | None
    reason: str

    def __post_init__(self) -> None:
        if unknown := [condition for condition in self.when if condition not in CONDITIONS]:
            raise SpecError(f".when has {unknown[0]!r} (known: {', '.join(CONDITIONS)})")


@dataclass(frozen=True)
class LeftOutSpec:
    """Flags the reference run used that this track does not honour on sm_120: logged, not passed."""

    args: list[str]
    reason: str


@dataclass(frozen=True)
class DrafterElsewhere:
    """An EAGLE-3 drafter class (build.toml [eagle3_drafters]) and the tracks whose SGLang has it: the entrypoint
    names them when the installed SGLang lacks the class."""

    kind: str
    since: str  # the first SGLang release with it
    tracks: list[str]  # build.toml's tracks from `since` on
    images: list[str]  # their image tags in this profile


@dataclass(frozen=True)
class EntrypointSpec:
    """What the image's entrypoint reads from plan.json (its `entrypoint` key)."""

    sglang_version: str
    cuda_archs: list[str]
    port: int
    cache_dir: str
    default_mode: str  # what `docker run IMAGE` runs (build.toml [defaults] mode, the Dockerfile's CMD)
    modes: dict[str, ModeSpec]
    runtime: list[RuntimeRuleSpec]
    left_out: list[LeftOutSpec]
    drafters: dict[str, DrafterElsewhere]

    def __post_init__(self) -> None:
        if not self.modes:
            raise SpecError(".modes is empty")
        if self.default_mode not in self.modes:
            raise SpecError(f".default_mode {self.default_mode!r} is not one of .modes")


T = TypeVar("T")
_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", bool: "a boolean", NoneType: "null"}


def _kind(value: Any) -> str:
    return _NAMES.get(type(value), type(value).__name__)


def _value(hint: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (UnionType, typing.Union):
        if value is None and NoneType in args:
            return None
        (hint,) = [a for a in args if a is not NoneType]
        return _value(hint, value, where)
    if is_dataclass(hint):
        return decode(hint, value, where)
    kind = origin or hint  # list[X] and dict[K, V]: a list, an object (any Mapping)
    if not isinstance(value, Mapping if kind is dict else kind) or (kind is int and isinstance(value, bool)):
        raise SpecError(f"{where} is {_kind(value)}, not {_NAMES.get(kind, kind.__name__)}")
    if origin is list:
        return [_value(args[0], item, f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        return {key: _value(args[1], item, f"{where}.{key}") for key, item in value.items()}
    return value


def decode(cls: type[T], data: Any, where: str = "entrypoint") -> T:
    """`cls` (a dataclass of this module) from decoded JSON, strictly: every key known, every type exact (no
    coercion); a key whose type allows null may be left out. Raises SpecError naming the key."""
    if not isinstance(data, Mapping):
        raise SpecError(f"{where} is {_kind(data)}, not an object")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    if unknown := [key for key in data if key not in names]:
        raise SpecError(f"{where} has the unknown key {unknown[0]!r} (known: {', '.join(names)})")
    values = {}
    for name in names:
        if name not in data and NoneType not in typing.get_args(hints[name]):
            raise SpecError(f"{where}.{name} is missing")
        values[name] = _value(hints[name], data[name], f"{where}.{name}") if name in data else None
    try:
        return cls(**values)
    except SpecError as exc:
        raise SpecError(f"{where}{exc}") from None


def from_plan(data: Any) -> EntrypointSpec:
    """The spec in a decoded plan.json: the whole plan, or its `entrypoint` object alone."""
    if isinstance(data, Mapping) and "entrypoint" in data:
        data = data["entrypoint"]
    return decode(EntrypointSpec, data)
