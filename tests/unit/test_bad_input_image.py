"""T0: an empty, blank or malformed `--image` is one line and exit 2 in every command that takes one (issue 35,
class 5; `sbom --image ''` was a traceback from the docker SDK): one argparse type, `image_ref.image_argument`
(verify checks the same with `check_reference` when it runs). Docker is never asked."""

from __future__ import annotations

import pytest

from sm120.build import docker_client
from tests.helpers import run_cli

COMMANDS = [
    ("sbom", ["sbom", "--out", "{tmp}/sbom.json"]),
    ("bench", ["bench", "--out", "{tmp}/bench"]),
    ("verify", ["verify"]),
]

IMAGES = [
    ("empty", "", "is empty: give an image reference"),
    ("blank", "   ", "is empty: give an image reference"),
    ("tab", "\t", "is empty: give an image reference"),
    ("upper-case", "Sglang-sm120:x", "'Sglang-sm120:x': not an image reference"),
    ("trailing-colon", "sglang-sm120:", "'sglang-sm120:': not an image reference"),
]


@pytest.mark.parametrize("argv", [c[1] for c in COMMANDS], ids=[c[0] for c in COMMANDS])
@pytest.mark.parametrize(("image", "expected"), [c[1:] for c in IMAGES], ids=[c[0] for c in IMAGES])
def test_a_bad_image_reference_is_one_line_and_exit_2(capsys, monkeypatch, tmp_path, argv, image, expected):
    def asked(*args, **kwargs):
        raise AssertionError("Docker was asked before --image was checked")

    monkeypatch.setattr(docker_client, "connect", asked)
    rc, _, err = run_cli(capsys, *[a.format(tmp=tmp_path) for a in argv], "--image", image)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err[-1500:])
    assert f"build.py {argv[0]}: error: " in lines[0] and expected in lines[0], lines
