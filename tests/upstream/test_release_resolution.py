"""T1: the release image's Python packages resolve, for the release profile's Python, against PyPI, and
`pip check` on the result names only what the track's CUDA fix-up pins set on purpose (docker/stages/fixups.sh
check, the build's own filter, run for real).

What the release build installs, taken from the plan (`build.py plan --profile release`): torch (PyTorch's cu130
index where PyPI's build is CUDA 12), the sgl-kernel wheel, SGLang and FlashInfer, then the fix-up pins one by one
in their install mode. This machine reaches PyPI only, so two files are stand-ins, metadata only, on a local
find-links directory:

- torch `2.9.1+cu130` (PyTorch's cu130 index): PyPI's torch 2.9.1 Requires-Dist without its CUDA 12.8 wheels, plus
  the CUDA 13.0 wheels PyTorch's build declares: `PYTORCH_EXTRA_INSTALL_REQUIREMENTS["13.0"]` in pytorch/pytorch
  `.github/scripts/generate_binary_build_matrix.py`, the revision of the 2.9 cycle (CUDA_ARCHES 12.6, 12.8, 13.0;
  its "12.8" list is exactly the nvidia-*-cu12 Requires-Dist of PyPI's torch 2.9.1 wheel, checked by hand on
  2026-12-02). Copied below (CU130_REQUIREMENTS) with that marker.
- upstream's `sgl_kernel-0.3.21+cu130` wheel (GitHub): the Requires-Dist of PyPI's sgl-kernel 0.3.21 (none), built
  from the same pyproject.toml (an assumption: the +cu130 file's own metadata is not readable from here).

Not covered: torchvision and torchaudio come from PyPI here (CUDA 12.8 builds; their metadata names torch==2.9.1 as
the cu130 builds' does, but those files are not read); which files pip would download; anything that runs.

`pip check` runs in an interpreter of this machine (3.11) over a metadata-only environment (each resolved
distribution's Name, Version and the Requires-Dist that apply on the target, markers evaluated for the release
image's Python and Linux x86_64), so it checks what the image's pip check would check.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from sm120.plan import resources as res
from sm120.plan.plan_types import Plan
from tests.upstream.conftest import TRACKS

ROOT = Path(__file__).resolve().parents[2]
FIXUPS = ROOT / "docker" / "stages" / "fixups.sh"
MACHINE = res.Resources(cpus=2, memory_bytes=24 * 1024**3, source="test")

# The release base's C library: Ubuntu 24.04 (noble) ships glibc 2.39, so pip there takes manylinux_2_17 .. 2_39.
GLIBC_MINOR = 39
# The release image's interpreter for marker evaluation: Ubuntu 24.04's python3 (3.12.3).
PYTHON_FULL = {"3.12": "3.12.3"}

# pytorch/pytorch .github/scripts/generate_binary_build_matrix.py (2.9 cycle), PYTORCH_EXTRA_INSTALL_REQUIREMENTS
# ["13.0"]: what the torch 2.9.x wheels on PyTorch's cu130 index declare beside torch's own requirements.
CU130_MARKER = "platform_system == 'Linux' and platform_machine == 'x86_64'"
CU130_REQUIREMENTS = {
    ("2.9.1", "13.0"): [
        "nvidia-cuda-nvrtc==13.0.48",
        "nvidia-cuda-runtime==13.0.48",
        "nvidia-cuda-cupti==13.0.48",
        "nvidia-cudnn-cu13==9.13.0.50",
        "nvidia-cublas==13.0.0.19",
        "nvidia-cufft==12.0.0.15",
        "nvidia-curand==10.4.0.35",
        "nvidia-cusolver==12.0.3.29",
        "nvidia-cusparse==12.6.2.49",
        "nvidia-cusparselt-cu13==0.8.0",
        "nvidia-nccl-cu13==2.27.7",
        "nvidia-nvshmem-cu13==3.3.24",
        "nvidia-nvtx==13.0.39",
        "nvidia-nvjitlink==13.0.39",
        "nvidia-cufile==1.15.0.42",
    ],
}


def target_environment(python: str) -> dict[str, str]:
    """PEP 508 marker values of the release image (Linux x86_64, CPython `python`)."""
    return {
        "implementation_name": "cpython",
        "implementation_version": PYTHON_FULL.get(python, python),
        "os_name": "posix",
        "platform_machine": "x86_64",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": PYTHON_FULL.get(python, python),
        "python_version": python,
        "sys_platform": "linux",
        "extra": "",
    }


def pip(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The machine's find-links (if any) are no candidate of the release build.
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, cwd=cwd, env=env, check=False
    )


def resolve(tmp: Path, python: str, requirements: list[str], *, deps: bool = True, links: Path | None = None) -> list:
    """pip's own resolution for the target (`pip install --dry-run --report`): [(name, version, requires_dist)]."""
    report = tmp / f"report-{len(list(tmp.glob('report-*.json')))}.json"
    platforms = [f"--platform=manylinux_2_{m}_x86_64" for m in range(17, GLIBC_MINOR + 1)] + [
        "--platform=manylinux2014_x86_64"
    ]
    proc = pip(
        "install",
        "--dry-run",
        "--quiet",
        "--ignore-installed",
        f"--target={tmp / 'never-written'}",
        f"--report={report}",
        f"--python-version={python}",
        *platforms,
        "--only-binary=:all:",
        *([f"--find-links={links}"] if links else []),
        *([] if deps else ["--no-deps"]),
        *requirements,
        cwd=tmp,
    )
    assert proc.returncode == 0, f"pip could not resolve {requirements} for Python {python}:\n{proc.stderr[-3000:]}"
    items = json.loads(report.read_text())["install"]
    return [(i["metadata"]["name"], i["metadata"]["version"], i["metadata"].get("requires_dist") or []) for i in items]


def standin_wheel(directory: Path, filename: str, requires: list[str]) -> Path:
    """A wheel that holds only its metadata (pip reads nothing else to resolve)."""
    import zipfile

    name, version, _build, _tags = parse_wheel_filename(filename)
    info = f"{filename.split('-')[0]}-{version}.dist-info"
    tags = filename[: -len(".whl")].split("-")[-3:]
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    wheel = "Wheel-Version: 1.0\nGenerator: sglang-sm120 stand-in\nRoot-Is-Purelib: false\nTag: {}\n".format(
        "-".join(tags)
    )
    path = directory / filename
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{info}/METADATA", meta)
        z.writestr(f"{info}/WHEEL", wheel)
        z.writestr(f"{info}/RECORD", "")
    return path


def install_set(tmp: Path, plan: Plan) -> tuple[dict[str, tuple[str, str, list]], list[str]]:
    """What the release build's pip leaves in the venv before the fix-ups: {canonical name: (name, version, reqs)},
    and the stand-ins used (one line each)."""
    python = plan.python_version
    links = tmp / "links"
    links.mkdir()
    notes: list[str] = []
    wanted = []
    if plan.torch_index:
        key = (plan.torch_version, plan.torch_cuda)
        if key not in CU130_REQUIREMENTS:
            pytest.fail(f"no CUDA requirement list for torch {key[0]} CUDA {key[1]}: add PyTorch's to this test")
        (torch,) = resolve(tmp, python, [f"torch=={plan.torch_version}"], deps=False)
        own = [r for r in torch[2] if not Requirement(r).name.startswith("nvidia-")]
        dropped = [r for r in torch[2] if r not in own]
        assert dropped and all(Requirement(r).name.endswith("-cu12") for r in dropped), dropped  # PyPI's is CUDA 12
        local = "cu" + plan.torch_cuda.replace(".", "")
        version = f"{plan.torch_version}+{local}"
        tag = f"cp{python.replace('.', '')}-cp{python.replace('.', '')}-manylinux_2_28_x86_64"
        requires = own + [f"{r}; {CU130_MARKER}" for r in CU130_REQUIREMENTS[key]]
        standin_wheel(links, f"torch-{version}-{tag}.whl", requires)
        wanted.append(f"torch=={version}")
        notes.append(f"torch {version}: PyPI's {plan.torch_version} requirements with PyTorch's CUDA {key[1]} list")
    else:
        wanted.append(f"torch=={plan.torch_version}")
    kernel = plan.sgl_kernel
    if kernel.source == "wheel":
        filename = kernel.wheel_url.rsplit("/", 1)[-1].replace("%2B", "+")
        (pypi_kernel,) = resolve(tmp, python, [f"{kernel.package}=={Version(kernel.version).public}"], deps=False)
        standin_wheel(links, filename, pypi_kernel[2])
        wanted.append(f"{kernel.package}=={kernel.version}")
        notes.append(f"{filename}: the Requires-Dist of PyPI's {pypi_kernel[0]} {pypi_kernel[1]}")
    else:
        wanted.append(f"{kernel.package}=={kernel.version}")
    wanted += [f"sglang=={plan.sglang_version}", f"flashinfer-python=={plan.flashinfer_version}"]
    found = resolve(tmp, python, wanted, links=links)
    return {canonicalize_name(n): (n, v, r) for n, v, r in found}, notes


def apply_fixups(tmp: Path, plan: Plan, installed: dict) -> dict:
    """The fix-up pins over `installed`, as fixups.sh apply installs them: `no-deps` replaces the one distribution,
    `deps` installs the pin with what it needs, keeping an installed distribution that already satisfies it (pip's
    only-if-needed upgrade)."""
    env = target_environment(plan.python_version)
    result = dict(installed)
    for pin in plan.fixups:
        if pin.install == "no-deps":
            ((name, version, reqs),) = resolve(tmp, plan.python_version, [pin.requirement], deps=False)
            result[canonicalize_name(name)] = (name, version, reqs)
            continue
        fresh = resolve(tmp, plan.python_version, [pin.requirement])
        needs: dict[str, list[Requirement]] = {}
        for _name, _version, reqs in fresh:
            for text in reqs:
                req = Requirement(text)
                if req.marker is None or req.marker.evaluate(env):
                    needs.setdefault(canonicalize_name(req.name), []).append(req)
        pinned = canonicalize_name(Requirement(pin.requirement).name)
        for name, version, reqs in fresh:
            key = canonicalize_name(name)
            have = result.get(key)
            keep = (
                key != pinned
                and have is not None
                and all(r.specifier.contains(have[1], prereleases=True) for r in needs.get(key, []))
            )
            if not keep:
                result[key] = (name, version, reqs)
    return result


def metadata_env(tmp: Path, dists: dict, python: str) -> Path:
    """A venv holding only dist-info metadata: Name, Version and the Requires-Dist that apply on the target."""
    where = tmp / "metadata-env"
    venv.EnvBuilder(with_pip=False).create(where)
    (site,) = where.glob("lib/python3*/site-packages")
    env = target_environment(python)
    for name, version, reqs in dists.values():
        applies = []
        for text in reqs:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                req.marker = None
                applies.append(str(req))
        info = site / f"{canonicalize_name(name).replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in applies)
        )
        (info / "INSTALLER").write_text("sglang-sm120 test\n")
    return where / "bin" / "python"


def run_fixups_check(tmp: Path, target_python: Path, pins: str) -> subprocess.CompletedProcess[str]:
    """docker/stages/fixups.sh check, for real; its `python3 -m pip check` is this machine's pip run against the
    metadata-only environment (`pip --python`), its filter this machine's interpreter."""
    wrapper = tmp / "bin" / "python3"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1 $2 $3" = "-m pip check" ]; then exec {sys.executable} -m pip --python {target_python} check; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{wrapper.parent}:{os.environ['PATH']}", FIXUP_PINS=pins)
    return subprocess.run(["bash", str(FIXUPS), "check"], capture_output=True, text=True, env=env, check=False)


@pytest.mark.parametrize("track", TRACKS)
def test_release_pins_resolve_and_pip_check_names_only_the_fixups(track: str, tmp_path: Path) -> None:
    plan = planmod.resolve(cfg.load(), profile="release", sglang=track, machine=MACHINE)
    installed, notes = install_set(tmp_path, plan)
    final = apply_fixups(tmp_path, plan, installed)
    for pin in plan.fixups:
        req = Requirement(pin.requirement)
        name, version, _ = final[canonicalize_name(req.name)]
        assert req.specifier.contains(version), f"{pin.requirement}: {name} {version} after the fix-ups"
    check = run_fixups_check(
        tmp_path, metadata_env(tmp_path, final, plan.python_version), plan.build_args["FIXUP_PINS"]
    )
    summary = (
        f"SGLang {track} release, Python {plan.python_version}: {len(installed)} distributions resolved, "
        f"{len(plan.fixups)} fix-up pins; stand-ins: {'; '.join(notes) or 'none'}"
    )
    print(summary)
    print(check.stdout)
    assert check.returncode == 0, f"{summary}\n{check.stdout}{check.stderr}"
    expected = [line for line in check.stdout.splitlines() if "expected (a fix-up pin)" in line]
    if plan.torch_index and any(p.requirement.startswith("nvidia-cublas==") for p in plan.fixups):
        # cuBLAS is pinned over torch's own pin (the reason it is a fix-up): pip check must see that conflict.
        assert any(re.search(r": torch \S+ has requirement nvidia-cublas==", line) for line in expected), check.stdout
    assert Version(final["torch"][1]).public == plan.torch_version
