"""The sm_120 personas (sm120/verify/personas.toml): what torch answers inside the image during the start-up check.
`load()` validates the file (every answer has a value and a source; unknown keys are errors); the in-image probe
(startup_probe.py) receives `Persona.answers(devices)`, the values only, and answers from nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, Field, ValidationError

from sm120.errors import UsageError
from sm120.plan import tomllib
from sm120.plan.config import Strict

PERSONAS = Path(__file__).with_name("personas.toml")
MIB = 1 << 20
T = TypeVar("T")


class Sourced(Strict, Generic[T]):
    value: T
    source: str = Field(min_length=10)


def _sm120(value: list[int]) -> list[int]:
    if value[0] != 12:
        raise ValueError(f"{value} is not an sm_120-family capability (12, x)")
    return value


Count = Sourced[Annotated[int, Field(ge=1)]]


class Persona(Strict):
    summary: str
    name: Sourced[Annotated[str, Field(min_length=1)]]
    capability: Sourced[Annotated[list[int], Field(min_length=2, max_length=2), AfterValidator(_sm120)]]  # major, minor
    multi_processor_count: Count
    total_memory_mib: Count
    free_memory_mib: Count
    driver_cuda_version: Count  # what the driver's cuDriverGetVersion reports, e.g. 13000 = CUDA 13.0

    def answers(self, devices: int) -> dict[str, Any]:
        """The values the probe answers with (no sources: they stay here), for `devices` identical cards."""
        if devices < 1:
            raise ValueError("a persona has at least one card")
        if self.free_memory_mib.value > self.total_memory_mib.value:
            raise ValueError("free memory above total memory")
        return {
            "name": self.name.value,
            "capability": list(self.capability.value),
            "multi_processor_count": self.multi_processor_count.value,
            "total_memory": self.total_memory_mib.value * MIB,
            "free_memory": self.free_memory_mib.value * MIB,
            "driver_cuda_version": self.driver_cuda_version.value,
            "devices": devices,
        }


class Personas(Strict):
    default: str
    personas: dict[str, Persona] = Field(min_length=1)

    def get(self, key: str | None = None) -> Persona:
        key = key or self.default
        if key not in self.personas:
            raise UsageError(f"{PERSONAS.name}: no persona {key!r} (personas: {', '.join(sorted(self.personas))})")
        return self.personas[key]


def load(path: Path | None = None) -> Personas:
    path = path or PERSONAS
    try:
        personas = Personas.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: {exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UsageError(f"{path.name}: {'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None
    personas.get(personas.default)
    return personas
