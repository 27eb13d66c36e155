"""T1: the admin-key table of docs/security.md against each track's own auth code (issue 35). SGLang's decision
(`decide_request_auth` of srt/utils/auth.py, 0.5.9 and 0.5.23) is called in the release's interpreter with the keys
the image passes it, and each route's auth level is read from the release's srt/entrypoints/http_server.py (its
`@auth_level` marks; not imported: the server module needs CUDA libraries):

- an API key K and the admin key R nobody knows (what the entrypoint passes with API_KEY_FILE alone): K opens an
  ordinary route and not an admin-optional one (/flush_cache), which only R opens; /health needs no key;
- K and no admin key (SGLang's own default): K opens the admin-optional routes too, the reason the image closes them.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from tests.upstream.conftest import TRACKS
from tests.upstream.env import run_snippet

K, R = "api-key-K-0123456789", "admin-key-R-nobody-knows-0123456789"  # the table's K and R

# (id, method, route, SGLang's auth level of the route, api_key, admin_api_key, bearer sent, allowed)
CASES: list[tuple[str, str, str, str, str | None, str | None, str | None, bool]] = [
    ("closed-normal-with-K", "POST", "/generate", "normal", "K", "R", "K", True),
    ("closed-normal-without-a-key", "POST", "/generate", "normal", "K", "R", None, False),
    ("closed-normal-with-R", "POST", "/generate", "normal", "K", "R", "R", False),
    ("closed-admin-with-K", "POST", "/flush_cache", "admin_optional", "K", "R", "K", False),
    ("closed-admin-with-R", "POST", "/flush_cache", "admin_optional", "K", "R", "R", True),
    ("closed-admin-without-a-key", "POST", "/flush_cache", "admin_optional", "K", "R", None, False),
    ("closed-health-without-a-key", "GET", "/health", "normal", "K", "R", None, True),
    ("closed-health-generate-without-a-key", "GET", "/health_generate", "normal", "K", "R", None, True),
    # SGLang's default with an API key alone: K opens the admin routes (why the entrypoint passes R).
    ("open-admin-with-K", "POST", "/flush_cache", "admin_optional", "K", None, "K", True),
    ("open-admin-without-a-key", "POST", "/flush_cache", "admin_optional", "K", None, None, False),
    ("open-normal-with-K", "POST", "/generate", "normal", "K", None, "K", True),
    ("open-health-without-a-key", "GET", "/health", "normal", "K", None, None, True),
]

CODE = """
import ast, importlib.util, inspect, pathlib

try:
    from sglang.srt.utils.auth import AuthLevel, decide_request_auth
except ImportError as exc:
    emit({"missing": f"sglang.srt.utils.auth has no AuthLevel / decide_request_auth ({exc})"})
    raise SystemExit(0)
WANTED = {"method", "path", "authorization_header", "api_key", "admin_api_key", "auth_level"}
signature = inspect.signature(decide_request_auth)
if not WANTED <= set(signature.parameters):
    emit({"missing": f"decide_request_auth{signature} lacks {sorted(WANTED - set(signature.parameters))}"})
    raise SystemExit(0)

# Each route's @auth_level mark in the server module (a route without one is NORMAL, as SGLang resolves it).
root = pathlib.Path(importlib.util.find_spec("sglang").submodule_search_locations[0])
tree = ast.parse((root / "srt" / "entrypoints" / "http_server.py").read_text())
levels = {}
for node in ast.walk(tree):
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        continue
    routes, level = [], AuthLevel.NORMAL.value
    for deco in node.decorator_list:
        if not isinstance(deco, ast.Call):
            continue
        name = deco.func.attr if isinstance(deco.func, ast.Attribute) else getattr(deco.func, "id", "")
        if name in ("get", "post", "put", "delete", "api_route") and deco.args:
            if isinstance(deco.args[0], ast.Constant) and isinstance(deco.args[0].value, str):
                routes.append(deco.args[0].value)
        elif name == "auth_level" and deco.args and isinstance(deco.args[0], ast.Attribute):
            level = AuthLevel[deco.args[0].attr].value
    for route in routes:
        levels[route] = level

out = {}
for case_id, method, route, _level, api_key, admin_api_key, bearer, _allowed in CASES:
    decision = decide_request_auth(
        method=method,
        path=route,
        authorization_header=None if bearer is None else "Bearer " + KEYS[bearer],
        api_key=KEYS[api_key],
        admin_api_key=KEYS[admin_api_key],
        auth_level=AuthLevel(levels.get(route, AuthLevel.NORMAL.value)),
    )
    out[case_id] = {"level": levels.get(route), "allowed": decision.allowed, "status": decision.error_status_code}
emit({"decisions": out})
"""


@functools.cache
def decisions(python: Path) -> dict[str, Any]:
    """Every case's decision by one release's own code (one interpreter start per track)."""
    keys = {"K": K, "R": R, None: None}
    return run_snippet(python, f"CASES = {CASES!r}\nKEYS = {keys!r}\n" + CODE, stubs=False)


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
@pytest.mark.parametrize(
    ("case_id", "route", "level", "allowed"), [(c[0], c[2], c[3], c[7]) for c in CASES], ids=[c[0] for c in CASES]
)
def test_sglangs_own_auth_decides_as_the_route_table_says(sglang_python, request, case_id, route, level, allowed):
    version = request.node.callspec.params["sglang_python"]
    result = decisions(sglang_python)
    if "missing" in result:
        pytest.fail(
            f"SGLang {version} renamed or moved its auth decision: {result['missing']}; find its equivalent, then "
            "update this test, sm120/image/entrypoint/api_key.py and docs/security.md",
            pytrace=False,
        )
    found = result["decisions"][case_id]
    assert found["level"] is not None, f"SGLang {version}'s http_server.py serves no {route}"
    assert found["level"] == level, f"SGLang {version} marks {route} {found['level']}, docs/security.md says {level}"
    assert found["allowed"] is allowed, (
        f"SGLang {version}: {case_id} is {'allowed' if found['allowed'] else 'refused'} (HTTP {found['status']})"
    )
