"""`build.py preflight`: the builder check against build.toml's [builder], with stand-ins for the engine's facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120 import cli
from sm120.build import cmd_preflight as preflight
from sm120.errors import UsageError
from sm120.plan import config as cfg
from tests.helpers import write_config

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3


class FakeClient:
    """Stands in for docker.DockerClient: `info()` as the Engine API answers it, nothing else."""

    def __init__(self, root_dir: Path, memory_gib: float, cpus: int = 16) -> None:
        self._info = {"DockerRootDir": str(root_dir), "MemTotal": int(memory_gib * GIB), "NCPU": cpus}
        self.closed = False
        self.present: set[str] = set()

    def info(self) -> dict[str, object]:
        return self._info

    @property
    def images(self):
        import docker

        present = self.present

        class Images:
            def get(self, tag: str) -> object:
                if tag not in present:
                    raise docker.errors.ImageNotFound(tag)
                return object()

        return Images()

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def engine_with(monkeypatch):
    """Make the engine report `memory_gib` and `free_gib` free under its root (a real directory here)."""

    def configure(tmp_path: Path, *, memory_gib: float, free_gib: float | None) -> FakeClient:
        client = FakeClient(tmp_path, memory_gib)
        monkeypatch.setattr(preflight.docker_client, "connect", lambda: client)
        monkeypatch.setattr(preflight, "free_bytes", lambda path: None if free_gib is None else int(free_gib * GIB))
        return client

    return configure


def needs(profile: str = "release") -> cfg.BuilderNeeds:
    return cfg.load(ROOT / "build.toml").builder[profile]


def test_every_profile_has_builder_needs_and_every_entry_is_a_profile():
    config = cfg.load(ROOT / "build.toml")
    assert set(config.builder) == set(config.profiles)


def test_a_runner_with_too_little_disk_fails_in_one_line_naming_found_and_needed(tmp_path, engine_with, capsys):
    client = engine_with(tmp_path, memory_gib=64, free_gib=14.2)
    assert cli.main(["preflight", "--profile", "release"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        f"build.py preflight: failed: found 14.2 GiB free on {tmp_path}, "
        f"the release build of 0.5.23 (from nothing) needs {needs().min_disk_gib:g} GiB"
    ]
    assert client.closed


def test_too_little_memory_and_disk_are_both_named(tmp_path, engine_with, capsys):
    engine_with(tmp_path, memory_gib=7.0, free_gib=1.0)
    assert cli.main(["preflight", "--profile", "release"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "found 1.0 GiB free" in err and "found 7.0 GiB of memory" in err
    assert f"needs {needs().min_memory_gib:g} GiB" in err


def test_a_builder_that_fits_passes_and_says_what_it_found(tmp_path, engine_with, capsys):
    engine_with(tmp_path, memory_gib=128, free_gib=500)
    assert cli.main(["preflight", "--profile", "release"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("preflight: the release build of 0.5.23 (from nothing) fits: 500.0 GiB free")
    assert "128.0 GiB of memory" in out


def test_the_profiles_own_needs_are_used(tmp_path, engine_with):
    offline, release = needs("offline"), needs("release")
    assert offline.min_disk_gib < release.min_disk_gib
    between = (offline.min_disk_gib + release.min_disk_gib) / 2
    engine_with(tmp_path, memory_gib=release.min_memory_gib, free_gib=between)
    assert cli.main(["preflight", "--profile", "offline"]) == 0
    assert cli.main(["preflight", "--profile", "release"]) == 1


def test_a_remote_engine_is_warned_about_not_failed(tmp_path, engine_with, capsys):
    engine_with(tmp_path, memory_gib=64, free_gib=None)
    assert cli.main(["preflight", "--profile", "release"]) == 0
    out = capsys.readouterr().out
    assert "warning:" in out and "free disk not checked" in out


def test_free_bytes_measures_a_real_directory_and_none_for_a_missing_one(tmp_path):
    free = preflight.free_bytes(str(tmp_path))
    assert free is not None and free > 0
    assert preflight.free_bytes(str(tmp_path / "not-here")) is None


def test_a_profile_without_builder_needs_is_a_usage_error(tmp_path, capsys):
    text = (ROOT / "build.toml").read_text()
    start = text.index("[builder.offline]")
    end = text.index("\n[", start + 1)
    write_config(tmp_path, text[:start] + text[end + 1 :])
    assert cli.main(["preflight", "--config", str(tmp_path / "build.toml"), "--profile", "offline"]) == 2
    err = capsys.readouterr().err
    assert "has no [builder.offline]" in err and len(err.strip().splitlines()) == 1


def test_builder_needs_must_be_positive(tmp_path):
    write_config(tmp_path, edit=lambda text: text.replace("min_memory_gib = 16", "min_memory_gib = 0", 1))
    with pytest.raises(UsageError, match="min_memory_gib"):
        cfg.load(tmp_path / "build.toml")


def test_every_track_is_summed_and_an_image_already_built_needs_only_a_rebuild(tmp_path, engine_with, capsys):
    """`./dev test` builds every track: from nothing each needs min_disk_gib; a track whose image the engine holds
    (its stages cached) needs min_disk_gib_rebuild, so a warm machine is not refused a build it mostly has."""
    offline = needs("offline")
    assert offline.min_disk_gib_rebuild is not None and offline.min_disk_gib_rebuild < offline.min_disk_gib
    assert offline.min_disk_gib_bases is not None
    config = cfg.load(ROOT / "build.toml")
    tracks = sorted(config.tracks)
    cold = offline.min_disk_gib_bases + offline.min_disk_gib * len(tracks)  # the bases too: the engine is empty
    client = engine_with(tmp_path, memory_gib=64, free_gib=cold - 1)
    assert cli.main(["preflight", "--profile", "offline", "--every-track"]) == 1
    err = capsys.readouterr().err
    assert f"build of the bases, {tracks[0]} (from nothing)" in err
    assert f"needs {cold:g} GiB" in err and all(f"{v} (from nothing)" in err for v in tracks)
    from sm120.plan import resolve as planmod

    client.present = {config.profile("offline").base_image}  # the bases made (`./dev build`), no track yet
    assert cli.main(["preflight", "--profile", "offline", "--every-track"]) == 0
    out = capsys.readouterr().out
    assert f"needs {offline.min_disk_gib * len(tracks):g})" in out and "bases" not in out
    client.present |= {planmod.resolve(config, profile="offline", sglang=v).tags[0] for v in tracks}
    assert cli.main(["preflight", "--profile", "offline", "--every-track"]) == 0
    out = capsys.readouterr().out
    assert f"needs {offline.min_disk_gib_rebuild * len(tracks):g})" in out and "(a rebuild)" in out
    assert cli.main(["preflight", "--profile", "offline", "--sglang", "0.5.99"]) == 2


def test_what_the_run_writes_under_the_cache_counts_with_the_builds_on_one_file_system(
    tmp_path, engine_with, capsys, monkeypatch
):
    """`./dev test` passes --cache-gib for T1's venvs not built yet: on the engine's file system they are added to
    the builds' need, and the line names both."""
    monkeypatch.setenv("SGLANG_SM120_CACHE", str(tmp_path / "cache"))  # not made yet: its parent's file system
    builds = needs("offline").min_disk_gib + (needs("offline").min_disk_gib_bases or 0)  # an empty engine
    engine_with(tmp_path, memory_gib=64, free_gib=builds + 15)
    assert cli.main(["preflight", "--profile", "offline", "--cache-gib", "16"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"build.py preflight: failed: found {builds + 15:.1f} GiB free on {tmp_path}, the offline build of the bases, "
        f"0.5.23 (from nothing) needs {builds:g} GiB and 16 GiB more under {tmp_path / 'cache'} (--cache-gib)"
    )
    engine_with(tmp_path, memory_gib=64, free_gib=builds + 16)
    assert cli.main(["preflight", "--profile", "offline", "--cache-gib", "16"]) == 0
    assert f"(needs {builds + 16:g})" in capsys.readouterr().out


def test_a_cache_on_another_file_system_is_checked_on_its_own(tmp_path, engine_with, capsys, monkeypatch):
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs a second file system: /dev/shm (tmpfs) is absent or shares the temporary directory's")
    monkeypatch.setenv("SGLANG_SM120_CACHE", str(other / "sm120-cache-not-made"))
    builds = needs("offline").min_disk_gib + (needs("offline").min_disk_gib_bases or 0)  # an empty engine
    engine_with(tmp_path, memory_gib=64, free_gib=builds)  # free_bytes answers the same for both paths
    assert cli.main(["preflight", "--profile", "offline", "--cache-gib", str(builds + 1)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"found {builds:.1f} GiB free on {other}, the run writes {builds + 1:g} GiB under it")
    assert "needs" not in err  # the builds fit on the engine's file system
    with pytest.raises(SystemExit) as stopped:  # a usage error: argparse's one line, exit 2
        cli.main(["preflight", "--profile", "offline", "--cache-gib", "0"])
    assert stopped.value.code == 2
