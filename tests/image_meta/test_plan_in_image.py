"""T2: the plan is resolved once, on the host. The offline image of every track in build.toml holds, as
/etc/sglang-sm120/plan.json, byte for byte what `build.py plan --json --profile offline --sglang V` prints here (the
same checkout and machine as the build in `./dev test`), and verify reads that plan back from the image.
An image of a track that is not built here is skipped, saying so."""

from __future__ import annotations

import pytest
from packaging.version import Version

from sm120.plan import config as cfg
from sm120.plan import image_plan
from tests.helpers import run_build_py

pytestmark = [pytest.mark.image, pytest.mark.docker]

TRACKS = sorted(cfg.load().tracks, key=Version)


@pytest.mark.every_track
@pytest.mark.parametrize("version", TRACKS)
def test_the_images_plan_is_the_hosts_plan_byte_for_byte(dc, version: str):
    import docker

    plan = run_build_py("plan", "--json", "--profile", "offline", "--sglang", version)
    assert plan.returncode == 0, plan.stderr
    tag = image_plan.decode(plan.stdout, "build.py plan").tags[0]
    try:
        dc.images.get(tag)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{tag} is not built here (./dev test builds every track)")
    held = image_plan.plan_json(dc, tag).decode()
    assert held == plan.stdout, f"{tag}: its plan.json is not `build.py plan --json` of this checkout"
    assert image_plan.read(dc, tag) == image_plan.decode(plan.stdout, "build.py plan")
