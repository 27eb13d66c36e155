"""T1: each track's probe (build.toml [tracks."X".probe], what the image's HEALTHCHECK and the Kubernetes probes ask)
against that release's own source: the route is one SGLang serves and leaves open behind both keys
(srt/utils/auth.py), and `sglang_timeout_s` is SGLang's own wait in it (SGLANG_HEALTH_CHECK_TIMEOUT's default in
srt/entrypoints/http_server.py), which the probe's timeout is above. Read from the files, not imported (the server
module imports torch and CUDA libraries).
"""

from __future__ import annotations

import pytest

from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from tests.upstream.conftest import TRACKS

CODE = """
import importlib.util, pathlib, re
from sglang.srt.utils.auth import AuthLevel, decide_request_auth

root = pathlib.Path(importlib.util.find_spec("sglang").submodule_search_locations[0])
server = (root / "srt" / "entrypoints" / "http_server.py").read_text()
timeout = re.findall(r'HEALTH_CHECK_TIMEOUT = int\\(os\\.getenv\\("SGLANG_HEALTH_CHECK_TIMEOUT", (\\d+)\\)\\)', server)
routes = re.findall(r'@app\\.get\\("([^"]+)"\\)', server)

def open_behind_keys(path):
    return decide_request_auth(method="GET", path=path, authorization_header=None, api_key="sekrit-key-1",
                               admin_api_key="admin-key-2", auth_level=AuthLevel.NORMAL).allowed

emit({"timeout": timeout, "routes": routes, "open": open_behind_keys(ROUTE)})
"""


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_the_probe_waits_longer_than_sglangs_own_health_check(sglang_python, run_snippet, request):
    version = request.node.callspec.params["sglang_python"]
    probe = planmod.resolve(cfg.load(), sglang=version).probe
    result = run_snippet(sglang_python, f"ROUTE = {probe.route!r}\n" + CODE, stubs=False)
    assert result["timeout"] == [str(probe.sglang_timeout_s)], result["timeout"]
    assert probe.timeout_s > probe.sglang_timeout_s
    assert probe.route in result["routes"], f"SGLang {version} serves no GET {probe.route}"
    assert result["open"], f"SGLang {version} wants a key on {probe.route}: the probes send none"
