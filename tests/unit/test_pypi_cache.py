"""T0: stale or corrupt PyPI caches (issue 15, class 6), against a stand-in index on 127.0.0.1.

A cached metadata record or wheel that does not check out is fetched again once; a wheel is hashed, never
size-compared; when the second fetch does not check out either, one CheckFailed line names what to delete.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import threading
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sm120.errors import CheckFailed
from sm120.patches import pypi

VERSION = "9.9.9"
FILENAME = f"sglang-{VERSION}-py3-none-any.whl"


def _wheel_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("sglang/__init__.py", "")
        archive.writestr("sglang/version.py", f"__version__ = {VERSION!r}\n")
        archive.writestr(f"sglang-{VERSION}.dist-info/METADATA", f"Name: sglang\nVersion: {VERSION}\n")
    return buffer.getvalue()


WHEEL = _wheel_bytes()
SHA = hashlib.sha256(WHEEL).hexdigest()


class Index:
    """A stand-in PyPI: the JSON API for one release and its wheel; `serve` picks the bytes it answers."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.serve: Callable[[int], bytes] = lambda n: WHEEL
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                index.hits[self.path] += 1
                if self.path == "/pypi/sglang/json":
                    url = f"http://127.0.0.1:{self.server.server_port}/files/{FILENAME}"
                    files = [{"filename": FILENAME, "url": url, "digests": {"sha256": SHA}, "size": len(WHEEL)}]
                    body = json.dumps({"releases": {VERSION: files}}).encode()
                elif self.path == f"/files/{FILENAME}":
                    body = index.serve(index.hits[self.path])
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/pypi"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()

    @property
    def downloads(self) -> int:
        return self.hits[f"/files/{FILENAME}"]


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Index]:
    served = Index()
    monkeypatch.setattr(pypi, "INDEX", served.url)
    monkeypatch.setattr(pypi, "_RELEASES", {})
    monkeypatch.setenv("SGLANG_SM120_CACHE", str(tmp_path / "cache"))
    yield served
    served.server.shutdown()


def _meta() -> Path:
    return pypi.cache_root() / "meta" / f"{VERSION}.json"


def _wheel() -> Path:
    return pypi.cache_root() / "wheels" / FILENAME


def _record(**changes: object) -> str:
    url = pypi.INDEX.removesuffix("/pypi") + f"/files/{FILENAME}"
    record = {"version": VERSION, "filename": FILENAME, "url": url, "sha256": SHA, "size": len(WHEEL), **changes}
    return json.dumps(record)


def _same_size_corrupt() -> None:
    _wheel().write_bytes(bytes(len(WHEEL)))  # the size matches: only a hash tells


# id, what the cache holds before, downloads expected (the good cache: none)
CACHE_CASES: list[tuple[str, Callable[[], None], int]] = [
    ("sound", lambda: (_meta().write_text(_record()), _wheel().write_bytes(WHEEL)), 0),
    ("wheel-same-size-corrupt", lambda: (_meta().write_text(_record()), _same_size_corrupt()), 1),
    ("wheel-truncated", lambda: (_meta().write_text(_record()), _wheel().write_bytes(WHEEL[:10])), 1),
    ("wheel-missing", lambda: _meta().write_text(_record()), 1),
    ("meta-not-json", lambda: (_meta().write_text("{"), _wheel().write_bytes(WHEEL)), 0),
    ("meta-a-list", lambda: (_meta().write_text("[]"), _wheel().write_bytes(WHEEL)), 0),
    (
        "meta-missing-key",
        lambda: (_meta().write_text(json.dumps({"version": VERSION})), _wheel().write_bytes(WHEEL)),
        0,
    ),
    ("meta-other-release", lambda: (_meta().write_text(_record(version="1.0")), _wheel().write_bytes(WHEEL)), 0),
    ("meta-bad-sha", lambda: (_meta().write_text(_record(sha256="zz")), _wheel().write_bytes(WHEEL)), 0),
    ("meta-path-in-name", lambda: (_meta().write_text(_record(filename="../x.whl")), _wheel().write_bytes(WHEEL)), 0),
    ("meta-stale-sha", lambda: (_meta().write_text(_record(sha256="0" * 64)), _wheel().write_bytes(WHEEL)), 0),
    ("meta-not-utf8", lambda: (_meta().write_bytes(b"\xff\xfe"), _wheel().write_bytes(WHEEL)), 0),
]


@pytest.mark.parametrize(("arrange", "downloads"), [c[1:] for c in CACHE_CASES], ids=[c[0] for c in CACHE_CASES])
def test_a_cache_that_does_not_check_out_is_fetched_again(index, arrange, downloads):
    _meta().parent.mkdir(parents=True)
    _wheel().parent.mkdir(parents=True)
    arrange()
    path = pypi.download(VERSION)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA
    assert index.downloads == downloads
    assert json.loads(_meta().read_text())["sha256"] == SHA
    assert pypi.source_tree(VERSION).joinpath("sglang/version.py").is_file()


def test_a_corrupt_download_is_fetched_once_more_then_named(index):
    index.serve = lambda n: bytes(len(WHEEL))  # the index answers garbage every time
    with pytest.raises(CheckFailed) as info:
        pypi.download(VERSION)
    message = str(info.value)
    assert index.downloads == 2
    assert "\n" not in message and f"delete {_meta()} and {_wheel()}" in message
    assert not _wheel().exists() and not _wheel().with_name(FILENAME + ".part").exists()


def test_a_download_that_is_corrupt_once_is_fixed_by_the_second_fetch(index):
    index.serve = lambda n: bytes(len(WHEEL)) if n == 1 else WHEEL
    assert hashlib.sha256(pypi.download(VERSION).read_bytes()).hexdigest() == SHA
    assert index.downloads == 2


def test_a_stale_source_tree_is_extracted_again(index):
    tree = pypi.source_tree(VERSION)
    (tree / ".complete").write_text("sglang-0.0.1-py3-none-any.whl\n")
    (tree / "sglang/version.py").unlink()
    assert (pypi.source_tree(VERSION) / "sglang/version.py").is_file()
