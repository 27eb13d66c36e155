"""build.toml, loaded once into one typed, validated object.

Every error names the file, the key and what is allowed, in one line (`UsageError`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from .errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = ROOT / "build.toml"

_VERSION_RE = r"^\d+(\.\d+)*([a-z]+\d*)?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Project(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    title: str
    description: str
    licenses: str
    image: str = Field(pattern=r"^[a-z0-9][a-z0-9._/-]*$")


class Image(_Strict):
    user: str = Field(pattern=r"^[a-z_][a-z0-9_-]*$")
    uid: int = Field(ge=1, le=65534)
    cache_dir: str = Field(pattern=r"^/")
    port: int = Field(ge=1, le=65535)


class Defaults(_Strict):
    sglang: str
    profile: str


class Cuda(_Strict):
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    archs: list[str] = Field(min_length=1)

    @field_validator("archs")
    @classmethod
    def _capabilities(cls, archs: list[str]) -> list[str]:
        for arch in archs:
            if not re.fullmatch(r"\d+\.\d+", arch):
                raise ValueError(f"{arch!r} is not a compute capability like '12.0'")
        return archs


class Parallelism(_Strict):
    compile_job_memory_gib: float = Field(gt=0)
    compile_job_memory_gib_backward: float = Field(gt=0)
    memory_fraction: float = Field(gt=0, le=1)
    nvcc_threads_max: int = Field(ge=1)


class Torch(_Strict):
    version: str = Field(pattern=_VERSION_RE)
    pypi_cuda: str = Field(pattern=r"^\d+\.\d+$")


class SglKernel(_Strict):
    package: str
    version: str = Field(pattern=_VERSION_RE)
    pypi_cuda: str = Field(pattern=r"^\d+\.\d+$")
    pypi_archs: list[str]


# When a runtime rule applies (all listed conditions must hold): "nvfp4" = the target is a ModelOpt NVFP4
# checkpoint (what SGLang calls modelopt_fp4 / modelopt_mixed); "tp>1" = tensor parallelism over several GPUs;
# "single-node" = NNODES is 1.
RuleCondition = Literal["always", "nvfp4", "tp>1", "single-node"]


class RuntimeRule(_Strict):
    """What sm_120 needs from a track at run time, applied by the entrypoint (the user can override).

    `name` is how a user turns the rule off (SKIP_RUNTIME_RULES=name). `requires_patch` names a patch whose
    change must be in the installed SGLang (checked at run time with that patch's upstream_check), whether
    this image applied it or upstream already has it.
    """

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    when: RuleCondition | list[RuleCondition] = "always"
    env: dict[str, str] = {}
    args: list[str] = []
    requires_patch: str | None = None
    reason: str = Field(min_length=1)

    @field_validator("args")
    @classmethod
    def _starts_with_option(cls, args: list[str]) -> list[str]:
        if args and not args[0].startswith("--"):
            raise ValueError(f"{args[0]!r} is not an SGLang option (args start with '--')")
        return args

    @model_validator(mode="after")
    def _does_something(self) -> RuntimeRule:
        if not self.env and not self.args:
            raise ValueError(f"rule {self.name!r} sets neither env nor args")
        return self

    @property
    def conditions(self) -> list[str]:
        return list(self.when) if isinstance(self.when, list) else [self.when]


class LeftOut(_Strict):
    """A flag the reference run used that this track does not honour on sm_120; logged, not passed."""

    args: list[str] = Field(min_length=1)
    reason: str = Field(min_length=1)


class Track(_Strict):
    flashinfer: str = Field(pattern=_VERSION_RE)
    flash_attn: str = Field(pattern=_VERSION_RE)
    cxx_std: Literal[17, 20]
    patches: list[str] = []
    torch: Torch
    sgl_kernel: SglKernel
    runtime: list[RuntimeRule] = []
    left_out: list[LeftOut] = []


class FlashAttnKernels(_Strict):
    head_dims: Literal["all"] | list[Literal[32, 64, 96, 128, 192, 256]]
    dtypes: list[Literal["fp16", "bf16"]] = Field(min_length=1)
    backward: bool = False


class Profile(_Strict):
    summary: str
    base_image: str
    base_image_digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    runtime_base_image: str
    runtime_base_image_digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    bases: Literal["registry", "local"]
    python: str = Field(pattern=r"^3\.\d+$")
    torch_index: str | None = None
    sgl_kernel: Literal["source", "pypi"]
    flash_attn: FlashAttnKernels


class LocalBases(_Strict):
    debian_suite: str = Field(pattern=r"^[a-z]+$")
    debian_mirror: str = Field(pattern=r"^https?://")
    runtime_components: list[str] = Field(min_length=1)
    devel_components: list[str] = Field(min_length=1)


class Mode(_Strict):
    summary: str
    args: list[str] = []
    draft: bool = False  # needs DRAFT_MODEL_PATH, an EAGLE-3 drafter (the entrypoint checks its config.json)
    spec_num_steps: int | None = Field(default=None, ge=1)
    spec_eagle_topk: int | None = Field(default=None, ge=1)
    spec_num_draft_tokens: int | None = Field(default=None, ge=1)


class UpstreamCheck(_Strict):
    """Upstream already has the change when every regex in `patterns` matches the file at `path`."""

    path: str
    patterns: list[str] = Field(min_length=1)

    @field_validator("patterns")
    @classmethod
    def _regexes(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression ({exc})") from exc
        return patterns


class PatchVariant(_Strict):
    versions: str
    file: str

    @field_validator("versions")
    @classmethod
    def _specifier(cls, versions: str) -> str:
        try:
            SpecifierSet(versions)
        except InvalidSpecifier as exc:
            raise ValueError(f"{versions!r} is not a version range like '>=0.5.9,<0.5.10'") from exc
        return versions

    def matches(self, version: str) -> bool:
        return SpecifierSet(self.versions).contains(Version(version), prereleases=True)


class Patch(_Strict):
    component: Literal["sglang", "flash-attn"]
    summary: str
    upstream: str
    # One check, or a list of checks that must ALL hold (a change that spans several files).
    upstream_check: UpstreamCheck | list[UpstreamCheck] | None = None
    variants: list[PatchVariant] = Field(min_length=1)

    def variant_for(self, version: str) -> PatchVariant | None:
        return next((v for v in self.variants if v.matches(version)), None)

    @property
    def upstream_checks(self) -> list[UpstreamCheck]:
        if self.upstream_check is None:
            return []
        return self.upstream_check if isinstance(self.upstream_check, list) else [self.upstream_check]


class Sm120Trap(_Strict):
    """A backend or setting known not to run on sm_120 ([[sm120_traps]]). The start-up check (T2.5) fails when
    SGLang's own decision for a supported model lands on one of `values` in one of `settings`, naming `fix`."""

    settings: list[str] = Field(min_length=1)
    values: list[StrictBool | StrictInt | StrictStr] = Field(min_length=1)
    fix: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    source: str = Field(min_length=1)
    sglang: str | None = None  # the releases it holds for (a version range); None: every release
    quantization: list[str] = []  # only where SGLang's quantization is one of these; empty: any

    @field_validator("sglang")
    @classmethod
    def _range(cls, sglang: str | None) -> str | None:
        if sglang is not None:
            try:
                SpecifierSet(sglang)
            except InvalidSpecifier as exc:
                raise ValueError(f"{sglang!r} is not a version range like '<0.5.10'") from exc
        return sglang

    def applies(self, version: str, quantization: str | None) -> bool:
        if self.sglang is not None and not SpecifierSet(self.sglang).contains(Version(version), prereleases=True):
            return False
        return not self.quantization or quantization in self.quantization

    def hits(self, decisions: dict[str, Any]) -> list[tuple[str, Any]]:
        """(setting, value) pairs of `decisions` that land on this trap (1 and True are different values)."""
        found = []
        for setting in self.settings:
            if setting in decisions:
                value = decisions[setting]
                if any(type(value) is type(v) and value == v for v in self.values):
                    found.append((setting, value))
        return found


class Config(_Strict):
    project: Project
    image: Image
    defaults: Defaults
    cuda: Cuda
    parallelism: Parallelism
    tracks: dict[str, Track] = Field(min_length=1)
    profiles: dict[str, Profile] = Field(min_length=1)
    modes: dict[str, Mode] = Field(min_length=1)
    patches: dict[str, Patch] = {}
    local_bases: LocalBases
    sm120_traps: list[Sm120Trap] = []

    # Set by `load`, not by the file.
    path: Path = Field(default=DEFAULT_CONFIG, exclude=True)

    @property
    def root(self) -> Path:
        return self.path.parent

    def track(self, version: str) -> Track:
        if version not in self.tracks:
            raise UsageError(
                f"{self.path.name}: no track for SGLang {version!r} "
                f'(tracks: {", ".join(sorted(self.tracks, key=Version))}); add [tracks."{version}"] or pick one'
            )
        return self.tracks[version]

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            raise UsageError(
                f"{self.path.name}: unknown profile {name!r} (profiles: {', '.join(sorted(self.profiles))})"
            )
        return self.profiles[name]

    def patch(self, name: str) -> Patch:
        if name not in self.patches:
            raise UsageError(f"{self.path.name}: unknown patch {name!r} (patches: {', '.join(sorted(self.patches))})")
        return self.patches[name]


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(f'"{p}"' if isinstance(p, str) and "." in p else str(p) for p in loc)


def _one_line(path: Path, exc: ValidationError) -> str:
    errors = exc.errors()
    # A typo shows up as an unknown key and a missing one: the unknown key is the useful half.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(err["loc"])
    where = _where(loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys_for(loc)
        hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
        return f"{path.name}: unknown key {where}{hint}"
    if kind == "missing":
        return f"{path.name}: missing key {where}"
    value = err.get("input")
    shown = "" if isinstance(value, (dict, list)) else f" = {value!r}"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{path.name}: {where}{shown}: {msg}"


def _allowed_keys_for(loc: tuple[Any, ...]) -> list[str]:
    """Walk the Config schema along `loc`, skipping dict keys and list indices, and list the fields."""
    model: Any = Config
    parts = list(loc[:-1])
    i = 0
    while i < len(parts):
        part = parts[i]
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        annotation = field.annotation
        origin = getattr(annotation, "__origin__", None)
        if origin in (dict, list):
            annotation = annotation.__args__[-1]
            i += 1  # the next loc part is the dict key or list index
        model = annotation
        i += 1
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [name for name in model.model_fields if name != "path"]
    return []


def load(path: Path | str | None = None) -> Config:
    """Read, parse and validate build.toml; check cross-references and that patch files exist."""
    path = Path(path) if path is not None else DEFAULT_CONFIG
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; pass --config FILE or run from the checkout") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    try:
        config = Config.model_validate(raw).model_copy(update={"path": path.resolve()})
    except ValidationError as exc:
        raise UsageError(_one_line(path, exc)) from None
    _check_references(config)
    return config


def _check_references(config: Config) -> None:
    name = config.path.name
    for version, track in config.tracks.items():
        try:
            Version(version)
        except InvalidVersion:
            raise UsageError(f'{name}: [tracks."{version}"]: the key must be an SGLang version like "0.5.9"') from None
        for patch in track.patches:
            if patch not in config.patches:
                raise UsageError(
                    f'{name}: tracks."{version}".patches names {patch!r}, which has no [patches.{patch}] '
                    f"(patches: {', '.join(sorted(config.patches)) or 'none'})"
                )
    for patch_name, patch in config.patches.items():
        for i, variant in enumerate(patch.variants):
            if not (config.root / variant.file).is_file():
                raise UsageError(f"{name}: patches.{patch_name}.variants.{i}.file = {variant.file!r}: no such file")
    if config.defaults.sglang not in config.tracks:
        raise UsageError(
            f"{name}: defaults.sglang = {config.defaults.sglang!r} has no track "
            f"(tracks: {', '.join(sorted(config.tracks, key=Version))})"
        )
    if config.defaults.profile not in config.profiles:
        raise UsageError(
            f"{name}: defaults.profile = {config.defaults.profile!r} is not a profile "
            f"(profiles: {', '.join(sorted(config.profiles))})"
        )
