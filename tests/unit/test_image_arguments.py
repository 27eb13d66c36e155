"""T0: the arguments of the commands that run an image, checked before Docker is asked (or verify's suite starts).

- An empty, blank or malformed `--image` is one line and exit 2 in every command that takes one (`sbom --image ''`
  was a traceback from the docker SDK): one argparse type, `image_ref.image_argument` (verify checks the same with
  `check_reference` when it runs); nothing is written under --out.
- `--gpus` of verify and bench --image: a GPU twice, an empty entry, a UUID, a huge index, one line and exit 2;
  verify has no "none" (it would run no GPU check: leave --gpus out); good lists reach the suite normalised.
"""

from __future__ import annotations

import pytest

from sm120.build import docker_client, image_ref
from sm120.errors import UsageError
from tests.helpers import run_cli
from tests.unit.test_cli import BIG, assert_usage, refuse

BENCH_IMAGE = ["--env", "MODEL_PATH=/m", "--modes", "baseline"]
COMMANDS = [
    ("sbom", ["sbom", "--out", "{tmp}/sbom.json"]),
    ("bench", ["bench", *BENCH_IMAGE, "--out", "{tmp}/bench"]),
    ("verify", ["verify"]),
]

IMAGES = [
    ("empty", "", "is empty: give an image reference"),
    ("blank", "   ", "is empty: give an image reference"),
    ("tab", "\t", "is empty: give an image reference"),
    ("upper-case", "Sglang-sm120:x", "'Sglang-sm120:x': not an image reference"),
    ("trailing-colon", "sglang-sm120:", "'sglang-sm120:': not an image reference"),
    ("leading-colon", ":tag", "':tag': not an image reference"),
    ("path", "../x", "'../x': not an image reference"),
    ("space", "a b", "'a b': not an image reference"),
    ("bad-digest", "repo@sha256:abc", "'repo@sha256:abc': not an image reference"),
    ("url", "https://ghcr.io/o/x", "'https://ghcr.io/o/x': not an image reference"),
]


@pytest.mark.parametrize("argv", [c[1] for c in COMMANDS], ids=[c[0] for c in COMMANDS])
@pytest.mark.parametrize(("image", "expected"), [c[1:] for c in IMAGES], ids=[c[0] for c in IMAGES])
def test_a_bad_image_reference_is_one_line_and_exit_2(capsys, monkeypatch, tmp_path, argv, image, expected):
    refuse(monkeypatch, "Docker was asked before --image was checked", (docker_client, "connect"))
    rc, _, err = run_cli(capsys, *[a.format(tmp=tmp_path) for a in argv], "--image", image)
    assert_usage(rc, err)  # exit 2, no traceback, the value cut short
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith(f"build.py {argv[0]}: error: ") and expected in line, line
    assert not any(tmp_path.iterdir()), "nothing is written on bad input"


def test_image_ids_are_references_too():
    for value in ("a990a87c6a43", "sha256:" + "a" * 64, "a" * 64, "ghcr.io/o/x@sha256:" + "b" * 64):
        assert image_ref.check_reference(value, "--image", allow_id=True) == value
    with pytest.raises(UsageError, match="64-byte hexadecimal"):
        image_ref.check_reference("a" * 64, "--tag")


# --gpus of verify (and bench --image): checked before Docker is asked. verify has no "none" (it would run no GPU
# check: leave --gpus out).
GPUS = [
    ("empty", "", "--gpus is empty"),
    ("blank", "  ", "--gpus is empty"),
    ("twice", "0,0", "--gpus '0,0': GPU 0 is listed twice"),
    ("twice-leading-zero", "1,01", "GPU 01 is listed twice"),
    ("letters", "abc", "--gpus 'abc': give all"),
    ("empty-entry", "0,,1", "--gpus '0,,1'"),
    ("negative", "-1", "--gpus '-1'"),
    ("uuid", "GPU-abc", "--gpus 'GPU-abc'"),
    ("huge-index", BIG, "(5001 characters)"),
    ("all-upper-case", "ALL", "--gpus 'ALL'"),
]


@pytest.fixture
def no_docker(monkeypatch):
    """verify and bench --image must refuse --gpus before the engine is asked (or the suite starts)."""
    from sm120.bench import cmd_bench as bench
    from sm120.verify import runner

    why = "Docker was asked before --gpus was checked"
    refuse(monkeypatch, why, (runner, "run"), (bench, "read_image_plan"))


@pytest.mark.parametrize("command", ["verify", "bench"])
@pytest.mark.parametrize(("gpus", "expected"), [c[1:] for c in GPUS], ids=[c[0] for c in GPUS])
def test_bad_gpus_are_one_line_before_docker(capsys, tmp_path, no_docker, command, gpus, expected):
    extra = [*BENCH_IMAGE, "--out", str(tmp_path / "out")] if command == "bench" else []
    rc, _, err = run_cli(capsys, command, "--image", "sglang-sm120:x", "--gpus", gpus, *extra)
    last = assert_usage(rc, err, expected)
    assert ("none" in last) == (command == "bench"), last
    assert not (tmp_path / "out").exists()


def test_verify_none_is_not_a_gpu_list(capsys, no_docker):
    rc, _, err = run_cli(capsys, "verify", "--image", "sglang-sm120:x", "--gpus", "none")
    assert_usage(rc, err, "--gpus 'none': give all, or device numbers such as 0,1")


@pytest.mark.parametrize(("gpus", "passed"), [("all", "all"), ("0, 1", "0,1"), ("3", "3")])
def test_good_gpus_reach_the_suite_normalised(monkeypatch, capsys, gpus, passed):
    from sm120.verify import runner

    seen = {}
    monkeypatch.setattr(runner, "run", lambda image, **kw: seen.update(kw["extra_env"]) or 0)
    rc, _, err = run_cli(capsys, "verify", "--image", "sglang-sm120:x", "--gpus", gpus)
    assert rc == 0, err
    assert seen == {"SM120_VERIFY_GPUS": passed}
