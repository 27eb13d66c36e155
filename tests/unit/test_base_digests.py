"""The release bases built by digest (sm120/build/digests.py: `build.py build --base-image-digest` and
`--runtime-base-image-digest`, build.toml's `base_image_digest`): the build args name `name@digest`, the labels
record both bases, and bad input exits 2 in one line."""

from __future__ import annotations

import itertools
import shlex

import pytest

from sm120.build import digests
from sm120.errors import UsageError
from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from sm120.plan import resources as res
from tests.helpers import run_build_py, write_config

DEVEL = "sha256:" + "a" * 64
RUNTIME = "sha256:" + "b" * 64
MACHINE = res.Resources(cpus=2, memory_bytes=24 * 1024**3, source="test")


def build_print(*args: str) -> dict[str, str]:
    out = run_build_py("build", "--profile", "release", *args, "--print")
    assert out.returncode == 0, out.stderr
    cmd = shlex.split(out.stdout)
    values = {}
    for flag, value in itertools.pairwise(cmd):
        if flag in ("--build-arg", "--label"):
            key, _, val = value.partition("=")
            values[key] = val
    return values


def test_the_options_build_from_the_digests_and_label_them():
    config = cfg.load()
    release = config.profile("release")
    got = build_print("--base-image-digest", DEVEL, "--runtime-base-image-digest", RUNTIME)
    assert got["BASE_IMAGE"] == f"{release.base_image}@{DEVEL}"
    assert got["RUNTIME_BASE_IMAGE"] == f"{release.runtime_base_image}@{RUNTIME}"
    assert got["org.opencontainers.image.base.name"] == f"{release.runtime_base_image}@{RUNTIME}"
    assert got["org.opencontainers.image.base.digest"] == RUNTIME
    assert got["sglang-sm120.devel-base"] == f"{release.base_image}@{DEVEL}"


def test_without_digests_the_tags_are_built_and_no_base_digest_is_claimed():
    got = build_print()
    release = cfg.load().profile("release")
    assert got["BASE_IMAGE"] == release.base_image and "org.opencontainers.image.base.digest" not in got
    assert got["sglang-sm120.devel-base"] == release.base_image


def test_a_digest_in_build_toml_is_used_and_the_same_option_agrees(tmp_path):
    path = write_config(
        tmp_path, edit=lambda t: t.replace('bases = "registry"', f'bases = "registry"\nbase_image_digest = "{DEVEL}"')
    )
    config = cfg.load(path)
    plan = planmod.resolve(digests.pin(config, "release", base_image_digest=DEVEL), profile="release", machine=MACHINE)
    assert plan.base_image.endswith(f"@{DEVEL}")
    with pytest.raises(UsageError, match=r"pins profiles\.release\.base_image_digest"):
        digests.pin(config, "release", base_image_digest="sha256:" + "c" * 64)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--base-image-digest", "sha256:abc"], "must be an image digest"),
        (["--runtime-base-image-digest", "nvidia/cuda:13.0.1-base-ubuntu24.04"], "must be an image digest"),
        (["--profile", "offline", "--base-image-digest", DEVEL], "makes its bases here"),
    ],
)
def test_bad_digests_are_exit_2_in_one_line(args, says):
    out = run_build_py("build", *args, "--print")
    assert out.returncode == 2, out.stdout
    (line,) = out.stderr.strip().splitlines()
    assert says in line
