"""build.toml, loaded once into one typed, validated object. Every error names the file, the key and what is allowed,
in one line (`UsageError`)."""

from __future__ import annotations

import errno
import json
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import (
    AfterValidator,
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

from sm120.errors import UsageError, suggest
from sm120.image.entrypoint import errors as entrypoint_errors
from sm120.image.entrypoint.assemble import INTEGERS
from sm120.image.entrypoint.options import check_preset
from sm120.image.entrypoint.spec import CONDITIONS, draft_tree_most
from sm120.plan import ROOT, tomllib

DEFAULT_CONFIG = ROOT / "build.toml"
_FINAL = re.compile(r"[0-9]+(\.[0-9]+)*(\.post[0-9]+)?")  # a final release, what `track add` takes
PORTS = INTEGERS["--port"]  # (lowest, highest): the image's entrypoint's bounds of a port, the one place they are

_VERSION_RE = r"^\d+(\.\d+)*([a-z]+\d*)?$"


def _version_range(versions: str) -> str:
    try:
        SpecifierSet(versions)
    except InvalidSpecifier as exc:
        raise ValueError(f"{versions!r} is not a version range like '>=0.5.9,<0.5.14'") from exc
    return versions


# The SGLang releases (or flash-attn versions) an entry holds for: a packaging SpecifierSet, e.g. ">=0.5.9,<0.5.14".
VersionRange = Annotated[str, AfterValidator(_version_range)]


def in_range(versions: str | None, version: str) -> bool:
    """Whether `version` is in the range (None: every version; pre-releases count)."""
    return versions is None or SpecifierSet(versions).contains(Version(version), prereleases=True)


class Strict(BaseModel):
    # strict: no silent coercion ("4" or true where a number goes); allow_inf_nan: TOML's inf/nan are refused.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Project(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    title: str
    description: str
    licenses: str
    image: str = Field(pattern=r"^[a-z0-9][a-z0-9._/-]*$")
    published_profile: str  # its tags carry no profile suffix (build.toml says more)


class Image(Strict):
    user: str = Field(pattern=r"^[a-z_][a-z0-9_-]*$")
    uid: int = Field(ge=1, le=65534)
    cache_dir: str = Field(pattern=r"^/")
    port: int = Field(ge=PORTS[0], le=PORTS[1])


class Defaults(Strict):
    sglang: str
    profile: str
    mode: str  # what `docker run IMAGE` runs: the Dockerfile's CMD must be this mode


class Cuda(Strict):
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    archs: list[str] = Field(min_length=1)

    @field_validator("archs")
    @classmethod
    def _capabilities(cls, archs: list[str]) -> list[str]:
        for arch in archs:
            if not re.fullmatch(r"\d+\.\d+", arch):
                raise ValueError(f"{arch!r} is not a compute capability like '12.0'")
        return archs


class Parallelism(Strict):
    # le: a compile job needing over a TiB is a typo (and 1e308 x nvcc threads would overflow to inf)
    compile_job_memory_gib: float = Field(gt=0, le=1024)
    compile_job_memory_gib_backward: float = Field(gt=0, le=1024)
    memory_fraction: float = Field(gt=0, le=1)
    nvcc_threads_max: int = Field(ge=1)


class Torch(Strict):
    version: str = Field(pattern=_VERSION_RE)
    pypi_cuda: str = Field(pattern=r"^\d+\.\d+$")


class SglKernelWheel(Strict):
    """Upstream's prebuilt wheel at a direct URL, pinned by sha256 (what SGLang's own Dockerfile installs)."""

    url: str = Field(pattern=r"^https://\S+\.whl$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    cuda: str = Field(pattern=r"^\d+\.\d+$")
    why: str = Field(min_length=1)  # which file of several uploads, and why
    archs: list[str] = Field(min_length=1)  # the SASS it carries (the label sgl-kernel.archs), read in archs_source
    archs_source: str = Field(min_length=1)


class SglKernel(Strict):
    package: str
    version: str = Field(pattern=_VERSION_RE)
    pypi_cuda: str = Field(pattern=r"^\d+\.\d+$")
    pypi_archs: list[str]
    install: dict[str, Literal["wheel", "pypi", "source"]] = Field(min_length=1)  # by profile: how it gets it
    wheel: SglKernelWheel | None = None

    @model_validator(mode="after")
    def _wheel_when_used(self) -> SglKernel:
        if "wheel" in self.install.values() and self.wheel is None:
            raise ValueError("install names 'wheel' but there is no [sgl_kernel.wheel] (url, sha256, cuda, why)")
        return self


class Fixup(Strict):
    """A package pinned over what dependency resolution chose, after it (SGLang's CUDA fix-ups)."""

    requirement: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*==\S+$")
    torch_cuda: str = Field(pattern=r"^\d+$")  # the CUDA major of the torch build it applies to
    install: Literal["no-deps", "deps"]  # docker/stages/fixups.sh's words (build.toml says what each does)
    source: str = Field(min_length=1)  # where the pin comes from (upstream's Dockerfile, ...)
    reason: str = Field(min_length=1)


class Ranged(Strict):
    """A rule of the tracks written once ([[runtime]], [[left_out]], [[not_shipped]]): every track whose SGLang
    version is in `sglang` takes it (none: every track), in the order of build.toml."""

    sglang: VersionRange | None = None

    def holds_for(self, version: str) -> bool:
        return in_range(self.sglang, version)


# When a runtime rule applies (all must hold), named by the entrypoint that judges them (spec.py CONDITIONS).
RuleCondition = Literal[tuple(CONDITIONS)]  # type: ignore[valid-type]


class RuntimeRule(Ranged):
    """What sm_120 needs from a track at run time, applied by the entrypoint ([[runtime]] in build.toml says more)."""

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

    @property
    def what(self) -> str:
        return self.name

    def clash(self, other: RuntimeRule) -> str | None:  # what both claim for one track, or None
        return f"are named {self.name!r}" if other.name == self.name else None


class LeftOut(Ranged):
    """A flag the reference run used that the track does not honour on sm_120; logged, not passed."""

    args: list[str] = Field(min_length=1)
    reason: str = Field(min_length=1)

    @property
    def what(self) -> str:
        return " ".join(self.args)

    def clash(self, other: LeftOut) -> str | None:
        both = [arg for arg in self.args if arg.startswith("--") and arg in other.args]
        return f"leave out {both[0]!r}" if both else None


class ModePresets(Strict):
    """A track's EAGLE-3 draft tree for one draft mode: all three numbers, or none (SGLang chooses the tree)."""

    spec_num_steps: int | None = Field(default=None, ge=1)
    spec_eagle_topk: int | None = Field(default=None, ge=1)
    spec_num_draft_tokens: int | None = Field(default=None, ge=1)
    reason: str = Field(min_length=1)


class Probe(Strict):
    """How the HEALTHCHECK, the Kubernetes probes and Compose ask whether SGLang serves ([tracks."X".probe]).
    `sglang_timeout_s`: SGLang's own wait in its /health (SGLANG_HEALTH_CHECK_TIMEOUT; tests/upstream reads it);
    `timeout_s` is above it, or a probe would call a slow but working server dead."""

    route: str = Field(pattern=r"^/[A-Za-z0-9/_.-]*$")
    sglang_timeout_s: int = Field(ge=1)
    timeout_s: int = Field(ge=1)
    interval_s: int = Field(ge=1)
    start_period_s: int = Field(ge=1)  # the model load and the first JIT compiles: failures before it do not count
    retries: int = Field(ge=1)  # failures in a row after the start period that make the server unhealthy / unready
    reason: str = Field(min_length=1)

    @model_validator(mode="after")
    def _waits_for_sglang(self) -> Probe:
        if self.timeout_s <= self.sglang_timeout_s:
            raise ValueError(
                f"timeout_s = {self.timeout_s} must be above sglang_timeout_s = {self.sglang_timeout_s} (SGLang's own "
                "wait in the route): the probe would give up before SGLang answers"
            )
        if self.interval_s < self.timeout_s:
            raise ValueError(
                f"interval_s = {self.interval_s} is below timeout_s = {self.timeout_s}: one probe would still run when "
                "the next is due"
            )
        if self.start_period_s < self.interval_s:
            raise ValueError(f"start_period_s = {self.start_period_s} is below interval_s = {self.interval_s}")
        return self


class NotShipped(Ranged):
    """Files of the venv that serving on sm_120 never loads, left out of the runtime image ([[not_shipped]])."""

    paths: list[str] = Field(min_length=1)
    reason: str = Field(min_length=1)
    source: str = Field(min_length=1)
    # The CUDA major of the torch builds it holds for (their CUDA libraries lay out differently); None: every build.
    torch_cuda: str | None = Field(default=None, pattern=r"^\d+$")

    @field_validator("paths")
    @classmethod
    def _below_site_packages(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not path or path.startswith("/") or ".." in path.split("/") or any(c.isspace() for c in path):
                raise ValueError(f"{path!r} is not a path below site-packages (relative, no '..', no spaces)")
        return paths

    @property
    def what(self) -> str:
        return self.paths[0] + (" ..." if len(self.paths) > 1 else "")

    def clash(self, other: NotShipped) -> str | None:
        if None not in (self.torch_cuda, other.torch_cuda) and self.torch_cuda != other.torch_cuda:
            return None
        both = [path for path in self.paths if path in other.paths]
        return f"leave out {both[0]!r}" if both else None


# The keys of the ranged rules in build.toml (top-level arrays of tables), in the order `track add` lists them.
RULES = ("runtime", "left_out", "not_shipped")


class Track(Strict):
    flashinfer: str = Field(pattern=_VERSION_RE)
    flash_attn: str = Field(pattern=_VERSION_RE)
    cxx_std: Literal[17, 20]
    presets: dict[str, ModePresets] = {}  # by mode name: the draft tree of each draft mode
    torch: Torch
    sgl_kernel: SglKernel
    probe: Probe
    fixups: list[Fixup] = []
    # Resolved by `load`, never written in a track: every [patches.*] (its variants' ranges pick the file or skip
    # it), and the ranged rules whose `sglang` holds for the track's version.
    patches: list[str] = Field(default=[], exclude=True)
    runtime: list[RuntimeRule] = Field(default=[], exclude=True)
    left_out: list[LeftOut] = Field(default=[], exclude=True)
    not_shipped: list[NotShipped] = Field(default=[], exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _rules_are_written_once(cls, data: Any) -> Any:
        key = next((key for key in ("patches", *RULES) if isinstance(data, dict) and key in data), None)
        if key == "patches":
            raise ValueError("patches is not a track key: every [patches.NAME] applies where a variant's range holds")
        if key is not None:
            raise ValueError(f"{key} is not a track key: write each entry once as [[{key}]] with sglang = a range")
        return data


HEAD_DIMS = (32, 64, 96, 128, 192, 256)  # flash-attn's, what a profile's "all" builds


class FlashAttnKernels(Strict):
    head_dims: Literal["all"] | list[Literal[HEAD_DIMS]]  # type: ignore[valid-type]
    dtypes: list[Literal["fp16", "bf16"]] = Field(min_length=1)
    backward: bool = False
    split_kv: bool = True  # flash_fwd_split_* (paged or appended KV cache, num_splits > 1)


class Profile(Strict):
    summary: str
    base_image: str
    base_image_digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    runtime_base_image: str
    runtime_base_image_digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    bases: Literal["registry", "local"]
    python: str = Field(pattern=r"^3\.\d+$")
    torch_index: str | None = None
    flash_attn: FlashAttnKernels
    flashinfer_prebuilt: Literal["census"] | list[str] = []  # FlashInfer's modules built in (sm120/plan/prebuilt.py)


class LocalBases(Strict):
    debian_suite: str = Field(pattern=r"^[a-z]+$")
    debian_mirror: str = Field(pattern=r"^https?://")
    runtime_components: list[str] = Field(min_length=1)
    devel_components: list[str] = Field(min_length=1)


class BuilderNeeds(Strict):
    """What a machine needs to build one profile's image; `build.py preflight` checks the Docker Engine against it."""

    # Free space under the engine's DockerRootDir for one track's build from nothing, (when set) for a rebuild once
    # that track's image is in the engine with its stages cached, and (when set) once more while the profile's base
    # image is not in the engine (the local bases and the stages every track shares).
    min_disk_gib: float = Field(gt=0)
    min_disk_gib_rebuild: float | None = Field(default=None, gt=0)
    min_disk_gib_bases: float | None = Field(default=None, gt=0)
    min_memory_gib: float = Field(gt=0)  # the engine's memory (docker info: MemTotal)


class Mode(Strict):
    summary: str
    args: list[str] = []
    draft: bool = False  # needs DRAFT_MODEL_PATH, an EAGLE-3 drafter; every track says its tree in presets.NAME


class Eagle3Drafter(Strict):
    """An EAGLE-3 drafter class that only some releases of SGLang have ([eagle3_drafters.CLASS])."""

    kind: str = Field(min_length=1)
    since: str = Field(pattern=_VERSION_RE)  # the first SGLang release that registers it
    source: str = Field(min_length=1)


class UpstreamCheck(Strict):
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


class PatchVariant(Strict):
    versions: VersionRange
    file: str


class Patch(Strict):
    component: Literal["sglang", "flash-attn"]
    summary: str
    upstream: str
    # One check, or a list of checks that must ALL hold (a change that spans several files).
    upstream_check: UpstreamCheck | list[UpstreamCheck] | None = None
    variants: list[PatchVariant] = Field(min_length=1)

    def variant_for(self, version: str) -> PatchVariant | None:
        return next((v for v in self.variants if in_range(v.versions, version)), None)

    @property
    def upstream_checks(self) -> list[UpstreamCheck]:
        check = self.upstream_check
        return check if isinstance(check, list) else [] if check is None else [check]


class Sm120Trap(Strict):
    """A backend or setting known not to run on sm_120 ([[sm120_traps]]; build.toml says how verify uses it)."""

    settings: list[str] = Field(min_length=1)
    values: list[StrictBool | StrictInt | StrictStr] = Field(min_length=1)
    fix: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    source: str = Field(min_length=1)
    sglang: VersionRange | None = None  # the releases it holds for; None: every release
    quantization: list[str] = []  # only where SGLang's quantization is one of these; empty: any
    draft_attention: list[str] = []  # only where the drafter's ModelConfig.attention_arch ("MLA", ...) is one of these

    def applies(self, version: str, quantization: str | None, draft_attention: str | None = None) -> bool:
        return (
            in_range(self.sglang, version)
            and (not self.draft_attention or draft_attention in self.draft_attention)
            and (not self.quantization or quantization in self.quantization)
        )

    def hits(self, decisions: dict[str, Any]) -> list[tuple[str, Any]]:
        """(setting, value) pairs of `decisions` that land on this trap (1 and True are different values)."""
        found = [(setting, decisions[setting]) for setting in self.settings if setting in decisions]
        return [(s, value) for s, value in found if any(type(value) is type(v) and value == v for v in self.values)]


class Config(Strict):
    project: Project
    image: Image
    defaults: Defaults
    cuda: Cuda
    parallelism: Parallelism
    tracks: dict[str, Track] = Field(min_length=1)
    profiles: dict[str, Profile] = Field(min_length=1)
    modes: dict[str, Mode] = Field(min_length=1)
    patches: dict[str, Patch] = {}
    eagle3_drafters: dict[str, Eagle3Drafter] = {}
    local_bases: LocalBases
    builder: dict[str, BuilderNeeds] = {}  # by profile name
    sm120_traps: list[Sm120Trap] = []
    runtime: list[RuntimeRule] = []
    left_out: list[LeftOut] = []
    not_shipped: list[NotShipped] = []

    # Set by `load`, not by the file.
    path: Path = Field(default=DEFAULT_CONFIG, exclude=True)

    @property
    def root(self) -> Path:
        return self.path.parent

    def track(self, version: str) -> Track:
        if version not in self.tracks:
            add = f", or add it: python3 build.py track add {version}" if _FINAL.fullmatch(version) else ""
            raise UsageError(
                f"{self.path.name}: no track for SGLang {version!r} {_choices('tracks', self.tracks, version)}; "
                f"pick one{add}"
            )
        return self.tracks[version]

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            raise UsageError(f"{self.path.name}: unknown profile {name!r} {_choices('profiles', self.profiles, name)}")
        return self.profiles[name]

    def patch(self, name: str) -> Patch:
        if name not in self.patches:
            raise UsageError(f"{self.path.name}: unknown patch {name!r} {_choices('patches', self.patches, name)}")
        return self.patches[name]


def _choices(kind: str, names: Iterable[str], wrong: str) -> str:
    """'(profiles: offline, release; perhaps you meant ...)': the names of a table (tracks in version order)."""
    listed = sorted(names, key=Version if kind == "tracks" else None)
    return f"({kind}: {', '.join(listed) or 'none'}{suggest(wrong, listed)})"


def _one_line(path: Path, exc: ValidationError) -> str:
    errors = exc.errors()
    # A typo shows up as an unknown key and a missing one: the unknown key is the useful half.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(err["loc"])
    where = ".".join(f'"{p}"' if isinstance(p, str) and "." in p else str(p) for p in loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys_for(loc)
        hint = f" (allowed: {', '.join(allowed)}{suggest(loc[-1], allowed)})" if allowed else ""
        return f"{path.name}: unknown key {where}{hint}"
    if kind == "missing":
        return f"{path.name}: missing key {where}"
    value = err.get("input")
    shown = "" if isinstance(value, (dict, list)) else f" = {value!r}"
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "literal_error":
        expected = [e.strip().strip("'") for e in re.split(r",| or ", err["msg"].split("Input should be ", 1)[-1])]
        if isinstance(value, str) and value in expected:
            msg += " (strict: write the number without quotes)"
        else:
            msg += suggest(value, [e for e in expected if e])
    elif kind == "finite_number":
        msg += " (TOML's inf and nan are not taken; a number beyond 1.8e308 reads as inf)"
    elif kind == "greater_than" and isinstance(value, float) and value == 0:
        msg += " (a number too small for a double, such as 1e-400, reads as 0.0)"
    elif kind in _STRICT_TYPES:
        msg = f"{msg} (strict: write {_STRICT_TYPES[kind]}; a {type(value).__name__} is not converted)"
    return f"{path.name}: {where}{shown}: {msg}"


# pydantic's strict-mode error types, and what to write instead.
_STRICT_TYPES = {
    "int_type": "a whole number without quotes",
    "float_type": "a number without quotes",
    "string_type": "a quoted string",
    "bool_type": "true or false, without quotes",
}


def _allowed_keys_for(loc: tuple[Any, ...]) -> list[str]:
    """Walk the Config schema along `loc`, skipping dict keys and list indices, and list the fields."""
    model: Any = Config
    parts = iter(loc[:-1])
    for part in parts:
        field = model.model_fields.get(str(part)) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return []
        model = field.annotation
        if getattr(model, "__origin__", None) in (dict, list):
            model = model.__args__[-1]
            next(parts, None)  # the dict key or list index
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [name for name, field in model.model_fields.items() if not field.exclude]
    return []


def load(path: Path | str | None = None, *, text: str | None = None) -> Config:
    """Read, parse and validate build.toml; check cross-references and that patch files exist. With `text`: that
    text as if it were the file at `path` (`track add` checks what it would write, writing nothing)."""
    path = Path(path) if path is not None else DEFAULT_CONFIG
    try:
        if text is None:  # what is not a regular file is refused first: a FIFO would block the read forever
            if stat.S_ISDIR(mode := path.stat().st_mode):
                raise IsADirectoryError(errno.EISDIR, "a directory, not a file")
            if not stat.S_ISREG(mode):
                raise OSError(errno.EINVAL, "not a regular file (a FIFO or a device would block the read)")
            text = path.read_text(encoding="utf-8")
        config = Config.model_validate(tomllib.loads(text)).model_copy(update={"path": path.resolve()})
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; pass --config FILE or run from the checkout") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    except ValidationError as exc:
        raise UsageError(_one_line(path, exc)) from None
    except ValueError as exc:  # a number longer than int() converts: tomllib raises a bare ValueError
        raise UsageError(f"{path}: {entrypoint_errors.long_number(text) or str(exc)[:120]}") from None
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to be a build.toml") from None
    _check_references(config)
    return config.model_copy(update={"tracks": _resolve_tracks(config)})


def _check_references(config: Config) -> None:
    name = config.path.name
    for mode_name in config.modes:
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", mode_name):
            raise UsageError(
                f"{name}: [modes.{mode_name}]: a mode name is lower-case letters, digits, '-' and '_' "
                "(it is the image's first argument, e.g. `docker run IMAGE eagle3`)"
            )
    for version, track in config.tracks.items():
        try:
            Version(version)
        except InvalidVersion:
            raise UsageError(f'{name}: [tracks."{version}"]: the key must be an SGLang version like "0.5.9"') from None
        unknown = sorted(set(track.sgl_kernel.install) - set(config.profiles))
        missing = sorted(set(config.profiles) - set(track.sgl_kernel.install))
        if unknown or missing:
            raise UsageError(
                f'{name}: tracks."{version}".sgl_kernel.install must name every profile once '
                f"({', '.join(sorted(config.profiles))}); "
                + (f"unknown: {', '.join(unknown)}" if unknown else f"missing: {', '.join(missing)}")
            )
        _check_presets(config, version, track)
    for mode_name, mode in config.modes.items():  # presets the entrypoint would refuse at every start
        check_mode_args(name, mode_name, mode.args, config.runtime)
    for i, rule in enumerate(config.runtime):
        wanted = rule.requires_patch
        if wanted is not None and wanted not in config.patches:
            choices = _choices("patches", config.patches, wanted)
            raise UsageError(f"{name}: runtime.{i}.requires_patch: unknown patch {wanted!r} {choices}")
    root = config.root.resolve()
    for patch_name, patch in config.patches.items():
        for i, variant in enumerate(patch.variants):
            key = f"{name}: patches.{patch_name}.variants.{i}.file = {variant.file!r}"
            file = (config.root / variant.file).resolve()
            if not file.is_relative_to(root):
                raise UsageError(f"{key}: outside the repository ({root}); patch files live under patches/")
            if not file.is_file():
                raise UsageError(f"{key}: no such file")
    _check_defaults(config)


def _resolve_tracks(config: Config) -> dict[str, Track]:
    """Each track with every patch and the ranged rules that hold for its version, in build.toml's order. An entry
    that holds for no track, two entries that claim one thing (a rule's name, a flag, a path) for one track, or two
    variants of one patch for one track are errors."""
    name = config.path.name
    for key in RULES:
        for i, entry in enumerate(getattr(config, key)):
            if not any(entry.holds_for(version) for version in config.tracks):
                raise UsageError(
                    f"{name}: {key}.{i}.sglang = {entry.sglang!r} holds for no track "
                    f"{_choices('tracks', config.tracks, '')}: widen the range, or remove the entry"
                )
    resolved = {}
    for version, track in config.tracks.items():
        rules: dict[str, list[Any]] = {}
        for key in RULES:
            taken = [(i, e) for i, e in enumerate(getattr(config, key)) if e.holds_for(version)]
            for n, (i, entry) in enumerate(taken):
                clash = next(((j, c) for j, other in taken[:n] if (c := entry.clash(other))), None)
                if clash is not None:
                    held = f"sglang = {entry.sglang!r}" if entry.sglang else "no sglang: every release"
                    what = "runtime rules" if key == "runtime" else f"{key} entries"
                    raise UsageError(
                        f"{name}: {key}.{i} ({held}): two {what} of track {version} {clash[1]} ({key}.{clash[0]} is "
                        "the other): narrow their sglang ranges so that no track takes both"
                    )
            rules[key] = [entry for _, entry in taken]
        for patch_name, patch in config.patches.items():
            of = version if patch.component == "sglang" else track.flash_attn
            both = [str(i) for i, variant in enumerate(patch.variants) if in_range(variant.versions, of)]
            if len(both) > 1:
                raise UsageError(
                    f"{name}: patches.{patch_name}.variants.{' and .'.join(both)} hold for {patch.component} {of} "
                    f"(track {version}): give each release one variant"
                )
        resolved[version] = track.model_copy(update={"patches": list(config.patches), **rules})
    return resolved


def _check_defaults(config: Config) -> None:
    """[defaults] and [project] published_profile name a mode, a track and profiles that exist."""
    name, default = config.path.name, config.defaults.mode
    cmd = image_cmd_mode(config.root)
    if cmd is not None and cmd != default and default in config.modes:
        raise UsageError(
            f"{name}: defaults.mode = {default!r}, but the image's CMD runs {cmd!r} (Dockerfile CMD [{cmd!r}]): "
            "make them the same mode"
        )
    named = (
        ("defaults.mode", default, "modes", "is not a mode"),
        ("defaults.sglang", config.defaults.sglang, "tracks", "has no track"),
        ("defaults.profile", config.defaults.profile, "profiles", "is not a profile"),
        ("project.published_profile", config.project.published_profile, "profiles", "is not a profile"),
    )
    for key, value, kind, what in named:
        if value not in (table := getattr(config, kind)):
            raise UsageError(f"{name}: {key} = {value!r} {what} {_choices(kind, table, value)}")


def _check_presets(config: Config, version: str, track: Track) -> None:
    """Each draft mode has the track's draft tree, and one SGLang can run: all three numbers or none, draft tokens
    from 2 to 1 + top-k + (steps - 1) * top-k^2 (spec.draft_tree_most)."""
    where = f'{config.path.name}: tracks."{version}".presets'
    for mode_name, presets in track.presets.items():
        mode = config.modes.get(mode_name)
        if mode is None:
            raise UsageError(f"{where}.{mode_name}: no such mode {_choices('modes', config.modes, mode_name)}")
        if not mode.draft:
            raise UsageError(
                f"{where}.{mode_name}: the mode has draft = false: EAGLE-3 presets apply only to a mode "
                "with a drafter (set draft = true in [modes], or remove them)"
            )
        numbers = presets.model_dump(exclude={"reason"})  # spec_num_steps, spec_eagle_topk, spec_num_draft_tokens
        steps, topk, tokens = numbers.values()
        given = [key for key, value in numbers.items() if value is not None]
        if given and len(given) < len(numbers):
            missing = [key for key in numbers if key not in given]
            raise UsageError(
                f"{where}.{mode_name} sets {', '.join(given)} but not {', '.join(missing)}: give all three, "
                "or none to leave the draft tree to SGLang (it takes all three or none)"
            )
        if tokens is not None and tokens < 2:
            raise UsageError(f"{where}.{mode_name}.spec_num_draft_tokens = {tokens}: allowed from 2")
        if given and tokens > (most := draft_tree_most(steps, topk)):
            raise UsageError(
                f"{where}.{mode_name}.spec_num_draft_tokens = {tokens}: allowed 2 to {most} for "
                f"spec_num_steps {steps} and spec_eagle_topk {topk} (1 + top-k + (steps - 1) * top-k^2)"
            )
    for mode_name, mode in config.modes.items():
        if mode.draft and mode_name not in track.presets:
            raise UsageError(
                f"{where}.{mode_name} is missing: say which EAGLE-3 draft tree this track runs "
                "(spec_num_steps, spec_eagle_topk, spec_num_draft_tokens, or none for SGLang's own choice) "
                "and its reason"
            )


def image_cmd_mode(root: Path) -> str | None:
    """The mode the Dockerfile's CMD runs (CMD ["baseline"]), or None without a Dockerfile or an exec-form CMD."""
    dockerfile = root / "Dockerfile" if (root / "Dockerfile").is_file() else ROOT / "Dockerfile"
    try:
        lines = dockerfile.read_text(encoding="utf-8").splitlines()
        cmds = [line.strip()[3:].strip() for line in lines if line.strip().upper().startswith("CMD ")]
        argv = json.loads(cmds[-1]) if cmds else None
    except (OSError, ValueError):  # ValueError: not UTF-8, or not JSON
        return None
    if isinstance(argv, list) and argv and isinstance(argv[0], str) and not argv[0].startswith("-"):
        return argv[0]
    return None


def check_mode_args(
    file: str,
    mode: str,
    args: Sequence[str],
    rules: Iterable[RuntimeRule] = (),
    *,
    mode_key: str | None = None,
    rules_key: str = "runtime",
) -> None:
    """Raise UsageError ('build.toml: modes.eagle3.args: ...') for a mode's args or a rule's args that the
    entrypoint refuses (its own checks, options.py `check_preset`: no image is built around a preset it refuses at
    every start); `mode_key` and `rules_key` are where they are written in the file."""
    checks = [(f"{mode_key or f'modes.{mode}'}.args", args, f"preset {mode}")]
    checks += [(f"{rules_key}.{i}.args (rule {r.name})", r.args, f"rule {r.name}") for i, r in enumerate(rules)]
    for key, argv, what in checks:
        try:
            check_preset(list(argv), what)
        except entrypoint_errors.UsageError as exc:
            text = "; ".join(entrypoint_errors.one_line(line) for line in exc.lines)
            raise UsageError(f"{file}: {key}: the entrypoint would refuse it at every start: {text}") from None
