"""Image references and the build arguments that name them, checked before Docker or buildx sees them: parsed as the
Docker CLI parses them (docker-image-py: distribution/reference's grammar), so a mistake is one line naming the value.
"""

from __future__ import annotations

import argparse
import csv
import re
from typing import TYPE_CHECKING

from sm120.errors import UsageError, missing_package, suggest

if TYPE_CHECKING:
    from sm120.plan.plan_types import Plan

CACHE_TYPES = ("registry", "local", "inline", "gha", "s3", "azblob")  # docs.docker.com/build/cache/backends


def check_reference(value: str, flag: str, *, allow_id: bool = False) -> str:
    """Raise UsageError unless value is an image reference Docker takes (NAME[:TAG][@DIGEST]); return it."""
    from docker_image import reference

    shown = repr(value) if len(value) <= 80 else repr(value[:76]) + "..."
    if not value.strip():
        raise UsageError(f"{flag} is empty: give an image reference such as sglang-sm120:0.5.9-cu13.0.1")
    if allow_id and re.fullmatch(r"(sha256:)?[0-9a-f]{12,64}", value):  # an image ID, as `docker run` takes it
        return value
    try:
        reference.Reference.parse_normalized_named(value)
    except reference.InvalidReference as exc:
        reason = (str(exc.args[0]) if exc.args else type(exc).__name__).replace("%s", "").strip()
        raise UsageError(
            f"{flag} {shown}: not an image reference ({reason or 'invalid reference format'}); "
            "allowed: [REGISTRY/]NAME[:TAG][@sha256:DIGEST], lower-case, e.g. ghcr.io/owner/sglang-sm120:0.5.9"
        ) from None
    return value


def image_argument(value: str) -> str:
    """argparse type of every command's --image (sbom, verify, bench): check_reference's, ID allowed, so an empty or
    malformed reference is argparse's one line, before Docker is asked."""
    try:
        return check_reference(value, "--image", allow_id=True)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--image ")) from None  # argparse names it
    except ModuleNotFoundError as exc:  # docker-image-py: argparse would let it out as a traceback
        raise argparse.ArgumentTypeError(missing_package(exc)) from None


def check_registry(value: str) -> None:
    """--registry is a prefix (REGISTRY[/NAMESPACE...]): with a name after it, it must form a reference."""
    prefix = value.rstrip("/")
    if not prefix or "@" in prefix or (":" in prefix.split("/")[-1] and "/" in prefix):
        raise UsageError(
            f"--registry {value!r}: not a registry prefix; allowed: HOST[:PORT][/NAMESPACE], e.g. ghcr.io/owner"
        )
    try:
        check_reference(f"{prefix}/x:y", "--registry")
    except UsageError:
        raise UsageError(
            f"--registry {value!r}: not a registry prefix (lower-case HOST[:PORT][/NAMESPACE], e.g. ghcr.io/owner)"
        ) from None


def check_cache(spec: str, flag: str) -> None:
    """A --cache-from/--cache-to value in buildx's forms: a bare image reference (registry cache), or
    `type=TYPE,key=value,...` (buildx parses it as CSV, util/buildflags/cache.go): a known type, every field
    key=value, a registry cache with a valid ref, mode min or max."""
    try:
        fields = [f for f in next(csv.reader([spec])) if f != ""]  # one line: always one row
    except csv.Error as exc:
        raise UsageError(f"{flag} {spec!r}: not comma-separated key=value fields ({exc})") from None
    if not fields:
        raise UsageError(f"{flag} is empty: give e.g. type=registry,ref=ghcr.io/owner/cache or type=local,src=DIR")
    if all("=" not in f for f in fields):  # buildx's shorthand: refs of registry caches
        for field in fields:
            check_reference(field, flag)
        return
    attrs: dict[str, str] = {}
    for field in fields:
        key, sep, value = field.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {spec!r}: {field!r} is not key=value (fields: type=TYPE,key=value,...)")
        attrs[key.lower()] = value
    if (kind := attrs.get("type")) is None:
        raise UsageError(f"{flag} {spec!r}: no type= (types: {', '.join(CACHE_TYPES)})")
    if kind not in CACHE_TYPES:
        types = ", ".join(CACHE_TYPES)
        raise UsageError(f"{flag} {spec!r}: unknown cache type {kind!r} (types: {types}{suggest(kind, CACHE_TYPES)})")
    if kind == "registry":
        if "ref" not in attrs:
            raise UsageError(f"{flag} {spec!r}: a registry cache needs ref=IMAGE (e.g. ref=ghcr.io/owner/cache)")
        check_reference(attrs["ref"], f"{flag} ref=")
    if kind == "local":
        need = "src" if flag == "--cache-from" else "dest"
        if not attrs.get(need):
            raise UsageError(f"{flag} {spec!r}: a local cache needs {need}=DIR")
    if "mode" in attrs and attrs["mode"] not in ("min", "max"):
        raise UsageError(f"{flag} {spec!r}: mode={attrs['mode']!r} (allowed: min, max)")
    if flag == "--cache-from" and kind == "inline":
        raise UsageError(f"{flag} {spec!r}: inline is a --cache-to type; read it back with --cache-from IMAGE")


def tags_for(plan: Plan, registry: str | None, extra: list[str]) -> list[str]:
    """The plan's tags under `--registry` (what `build --registry` pushes and `deploy --registry` runs), then extra."""
    return [f"{registry.rstrip('/')}/{t}" if registry else t for t in plan.tags] + list(extra)
