"""T0: `build.py track add` on recorded metadata (no network): the stanza it writes for 0.5.23 equals build.toml's own
0.5.23 stanza in every fact it reads, the rest of build.toml stays byte for byte, and what it cannot establish (a
release with no wheel, a yanked one, a pin it cannot parse, a torch or kernel build that does not fit) exits 2 in one
line naming the fact, with build.toml untouched.

The recordings in tests/unit/data/track_add/ are what PyPI returned, trimmed: pypi.json (the JSON API's file entries
of sglang 0.5.23 and 0.5.10, torch 2.14.1, sglang-kernel 0.4.10: filename, url, sha256, size, yanked), the METADATA
of the sglang 0.5.23 and torch 2.14.1 wheels (header fields), the C++ check of torch 2.14.1's ATen/ATen.h, and per
compiled library of the sglang-kernel 0.4.10 wheel its DT_NEEDED, `cuobjdump --list-elf` (one cubin per arch) and the
cubins' toolkit note. The patch statuses of 0.5.23 are `build.py patches check --sglang 0.5.23`'s.
"""

from __future__ import annotations

import copy
import io
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sm120.errors import CheckFailed, UsageError
from sm120.patches import patching, pypi
from sm120.plan import config as cfg
from sm120.track import cmd_track as track_command
from sm120.track import facts as track_facts
from sm120.track import stanza as track_stanza
from sm120.track import wheel_members
from sm120.verify import elf
from tests.helpers import run_cli, track_list, without_track, write_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).parent / "data" / "track_add"
VERSION = "0.5.23"
REAL = cfg.load()
# `build.py patches check --sglang 0.5.23` (tests/upstream/test_patches_upstream.py EXPECTED checks the same).
PATCH_STATUSES = {"kimi-k25-eagle3-delegation": "already upstream", "torch-symm-mem-sm120": "applied"}


class Recorded:
    """track_facts.PyPISources' reads over the recordings; each test edits a copy (`files`, `text`, `libraries`)."""

    def __init__(self) -> None:
        self.files: dict[str, dict[str, list[dict[str, Any]]]] = json.loads((DATA / "pypi.json").read_text())
        kernel = json.loads((DATA / "sglang-kernel-0.4.10.json").read_text())
        self.kernel_names: list[str] = kernel["names"]
        self.libraries: dict[str, dict[str, Any]] = kernel["libraries"]
        self.text = {
            "sglang": (DATA / "sglang-0.5.23.METADATA").read_text(),
            "torch-2.14.1.dist-info/METADATA": (DATA / "torch-2.14.1.METADATA").read_text(),
            track_facts.ATEN_HEADER: (DATA / "torch-2.14.1-ATen.h").read_text(),
        }
        self.statuses = dict(PATCH_STATUSES)
        self.read: list[str] = []

    def release_files(self, project: str, version: str) -> list[dict[str, Any]] | None:
        return copy.deepcopy(self.files.get(project, {}).get(version))

    def sglang_metadata(self, version: str) -> tuple[str, str]:
        assert version == VERSION, version
        wheel = pypi.pick_wheel("sglang", version, self.files["sglang"][version])
        return self.text["sglang"], wheel.filename

    def wheel_names(self, wheel: pypi.WheelFile) -> list[str]:
        return list(self.kernel_names)

    def wheel_text(self, wheel: pypi.WheelFile, member: str) -> str:
        self.read.append(member)
        return self.text[member]

    def library(self, wheel: pypi.WheelFile, member: str) -> track_facts.Library:
        self.read.append(member)
        lib = self.libraries[member]
        return track_facts.Library(lib["needed"], elf.parse_list_elf(lib["list_elf"]), lib["toolkit"])

    def patch_results(self, config, version, patches) -> list[patching.Result]:
        out = []
        for name, patch in patches:
            status = patching.Status(self.statuses[name])
            variant = patch.variant_for(version) if status is patching.Status.APPLIED else None
            out.append(patching.Result(name, status, variant.file if variant else None, detail="x.py: hunk #1"))
        return out


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Recorded:
    sources = Recorded()
    monkeypatch.setattr(track_facts, "PyPISources", lambda progress=None: sources)
    return sources


@pytest.fixture
def without(tmp_path: Path) -> Path:
    """A copy of build.toml without the 0.5.23 track and the rules of it alone (defaults.sglang on the newest left)."""
    return write_config(tmp_path, edit=lambda text: without_track(text, VERSION))


def get(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def track_add(capsys, config: Path, *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, "track", "add", *args, "--config", str(config))


# ---------------------------------------------------------------------------------------------------
# The 0.5.23 stanza
# ---------------------------------------------------------------------------------------------------


def test_the_written_stanza_equals_build_tomls_0_5_23_in_every_fact_it_reads(capsys, recorded, without):
    before = without.read_text()
    source = max(cfg.load(without).tracks, key=track_facts.Version)
    rc, stanza, err = track_add(capsys, without, VERSION, "--dry-run")
    assert rc == 0, err
    rc, out, err = track_add(capsys, without, VERSION)
    assert rc == 0, err
    assert out == ""
    assert f'wrote [tracks."{VERSION}"] into {without}' in err
    assert f"track add {VERSION}: {VERSION} takes these rules of build.toml by their sglang range: runtime." not in err
    assert f"{VERSION} takes these rules of build.toml by their sglang range: left_out.0 " in err

    new = tomllib.loads(without.read_text())["tracks"][VERSION]
    mine = tomllib.loads((cfg.ROOT / "build.toml").read_text())["tracks"][VERSION]
    for path in track_facts.DERIVED:
        assert get(new, path) == get(mine, path), path
    # Everything else is the --from track's (the newest left), as it is.
    old = tomllib.loads(before)["tracks"][source]
    for key, value in old.items():
        if key not in ("torch", "sgl_kernel"):
            assert new[key] == value or (key,) in track_facts.DERIVED, key
    # The rest of the file is byte for byte what it was: the stanza was inserted, nothing else moved.
    text = without.read_text()
    assert stanza.startswith("# SGLang 0.5.23: written by `build.py track add 0.5.23`") and text.count(stanza) == 1
    assert text.replace("\n" + stanza, "", 1) == before, "more than a blank line and the stanza (--dry-run's) changed"
    _, end = track_stanza.track_span(before, source)
    assert text.splitlines()[end + 1] == stanza.splitlines()[0], "not right after the newest track's last table"
    # It loads and plans, for every profile (what `build.py plan --sglang 0.5.23` prints).
    for profile in ("offline", "release"):
        rc, out, err = run_cli(capsys, "plan", "--config", str(without), "--sglang", VERSION, "--profile", profile)
        assert rc == 0, err
        assert "torch            2.14.1 (CUDA 13.0" in out and "sglang-kernel 0.4.10 (PyPI wheel, CUDA 13.0" in out
    # The range reads were the few members it needs, not the libraries verify exempts (FA3's is 1 GB).
    assert "sgl_kernel/flash_ops.abi3.so" not in recorded.read
    assert "sgl_kernel/sm100/common_ops.abi3.so" in recorded.read


def test_every_fact_names_its_source_and_copied_keys_are_marked_for_review(capsys, recorded, without):
    before = without.read_text()
    rc, out, err = track_add(capsys, without, VERSION, "--dry-run")
    assert rc == 0, err
    assert without.read_text() == before, "--dry-run wrote build.toml"
    stanza = tomllib.loads(out)["tracks"][VERSION]
    assert stanza["torch"]["version"] == "2.14.1"
    lines = out.splitlines()

    def comment_above(key_line: str) -> str:
        i = next(n for n, line in enumerate(lines) if line.startswith(key_line))
        j = i
        while j > 0 and lines[j - 1].startswith("#"):
            j -= 1
        return " ".join(line[2:] for line in lines[j:i])

    wheel = "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert comment_above('flashinfer = "0.7.2"') == f"{wheel} METADATA: flashinfer_python[cu13]==0.7.2"
    assert comment_above('version = "2.14.1"') == f"{wheel} METADATA: torch==2.14.1"
    assert "METADATA: cuda-toolkit[" in comment_above('pypi_cuda = "13.0"') and "==13.0.3" in out
    assert "ATen/ATen.h: __cplusplus < 202002L -> #error C++20" in comment_above("cxx_std = 20")
    assert "DT_NEEDED libcudart.so.13" in out and "release 13.0, V13.0.88" in out
    assert "not read (no sm_120 by design, verify exempts them): sgl_kernel/flash_ops, sgl_kernel/flashmla_ops" in (
        comment_above("pypi_archs = ")
    )
    head = " ".join(line[2:] for line in lines[: lines.index(f'[tracks."{VERSION}"]')])
    assert (
        "Note: patches: the patch engine on sglang 0.5.23's wheel: kimi-k25-eagle3-delegation already upstream; "
        "torch-symm-mem-sm120 applied (patches/sglang/torch-symm-mem-sm120/0.5.14.patch)"
    ) in head
    assert comment_above('flash_attn = "2.8.3"').startswith('review: copied from [tracks."0.5.9"]')
    entries = [n for n, line in enumerate(lines) if line.startswith("[[")]
    assert entries and all(lines[n - 1].startswith("# review: copied from") for n in entries), "each entry is marked"
    assert "Note: sglang 0.5.23 requires cuda-python>=13.0: bindings for CUDA 13" in head
    # The rules written once are not copied: the stanza names those whose range holds 0.5.23, and marks for review
    # only those that held for 0.5.9 and not for 0.5.23.
    assert not {"patches", "runtime", "left_out", "not_shipped"} & set(stanza)
    takes = head.split("0.5.23 takes these rules of build.toml by their sglang range: ")[1].split(" review: ")[0]
    assert "left_out.0 --enable-flashinfer-allreduce-fusion (every release)" in takes
    assert "not_shipped.3 nvidia/cu13/lib/libnvrtc.alt.so* ... (every release)" in takes and "runtime." not in takes
    review = head.split("review: these held for 0.5.9, not for 0.5.23: ")[1]
    for rule in ("runtime.0 no-jit-deepgemm (<0.5.10)", "runtime.2 torch-symm-mem (<0.5.16)", "not_shipped.0"):
        assert rule in review, rule
    assert "left_out" not in review and "nvidia/cu13" not in review
    assert 'install = {release = "pypi", offline = "pypi"}' in out


def test_the_stanza_goes_after_the_newest_tracks_block(capsys, recorded, tmp_path):
    """With two tracks written in the other order, the new one still follows the newest's last table."""

    def swap(text: str) -> str:
        text = without_track(text, VERSION)
        first, end = track_stanza.track_span(text, "0.5.9")
        lines = text.splitlines(keepends=True)
        block = lines[first:end]
        # A fake newer track written before 0.5.9: the copy of 0.5.9's block, renamed.
        fake = "".join(block).replace('tracks."0.5.9"', 'tracks."0.5.22"')
        return "".join([*lines[:first], fake, "\n", *lines[first:]])

    config = write_config(tmp_path, edit=swap)
    rc, _, err = track_add(capsys, config, VERSION)
    assert rc == 0, err
    text = config.read_text()
    _, end_22 = track_stanza.track_span(text, "0.5.22")
    first_23, _ = track_stanza.track_span(text, VERSION)
    lines = text.splitlines()
    assert lines[end_22:first_23] and all(not line.strip() or line.startswith("#") for line in lines[end_22:first_23])
    assert track_stanza.track_span(text, "0.5.9")[0] > first_23  # 0.5.9 still comes after, untouched


# ---------------------------------------------------------------------------------------------------
# What it cannot establish: exit 2, one line naming the fact, build.toml untouched
# ---------------------------------------------------------------------------------------------------


def _refused(capsys, config: Path, *args: str, version: str = VERSION) -> str:
    before = config.read_text()
    rc, out, err = track_add(capsys, config, version, *args)
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("build.py track: error: "), err
    assert len([ln for ln in lines if "error" in ln]) == 1, err
    assert config.read_text() == before
    assert not list(config.parent.glob(".build.toml.*")), "a temporary file was left"
    return lines[-1]


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def test_a_release_with_no_wheel(capsys, recorded, without):
    recorded.files["sglang"][VERSION] = [f for f in recorded.files["sglang"]["0.5.10"] if f["filename"].endswith("gz")]
    line = _refused(capsys, without)
    assert "sglang: sglang 0.5.23 has no wheel on PyPI (only sglang-0.5.10.tar.gz); track add reads the wheel" in line


def test_a_yanked_release(capsys, recorded, without):
    for f in recorded.files["sglang"][VERSION]:
        f["yanked"], f["yanked_reason"] = True, "broken kernel pin"
    line = _refused(capsys, without)
    assert "sglang: sglang 0.5.23 is yanked on PyPI (broken kernel pin); pick another" in line


def test_a_release_pypi_does_not_have(capsys, recorded, without):
    line = _refused(capsys, without, version="0.5.99")
    assert "sglang: sglang 0.5.99 is not on PyPI" in line


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "Requires-Dist: torch==2.14.1\n",
            "Requires-Dist: torch>=2.14\n",
            "torch.version: sglang 0.5.23 (sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl METADATA) requires "
            "'torch>=2.14', not one version (==X.Y.Z): cannot pin the track",
        ),
        ("Requires-Dist: torch==2.14.1\n", "Requires-Dist: torch==2.14.*\n", "requires 'torch==2.14.*', not one"),
        ("Requires-Dist: torch==2.14.1\n", "Requires-Dist: torch===2.14.1;;\n", "cannot parse Requires-Dist"),
        (
            "Requires-Dist: sglang-kernel==0.4.10\n",
            "Requires-Dist: sglang-kernel @ https://example.invalid/k.whl\n",
            "sgl_kernel.version: sglang 0.5.23",
        ),
        ("Requires-Dist: sglang-kernel==0.4.10\n", "", "sgl_kernel.package: sglang 0.5.23"),
        (
            "Requires-Dist: sglang-kernel==0.4.10\n",
            "Requires-Dist: sglang-kernel==0.4.10\nRequires-Dist: sgl-kernel==0.3.21\n",
            "requires sgl-kernel and sglang-kernel of sgl-kernel, sglang-kernel; expected exactly one",
        ),
        ("Requires-Dist: flashinfer_python[cu13]==0.7.2\n", "", "flashinfer: sglang 0.5.23"),
        ("Requires-Dist: torch==2.14.1\n", "Requires-Dist: torch==2.99.0\n", "torch.pypi_cuda: torch 2.99.0 is not on"),
    ],
    ids=["range", "wildcard", "garbled", "url", "no-kernel", "two-kernels", "no-flashinfer", "missing-torch"],
)
def test_a_pin_it_cannot_read(capsys, recorded, without, old, new, expected):
    recorded.text["sglang"] = _edit(recorded.text["sglang"], old, new)
    assert expected in _refused(capsys, without)


def test_a_pin_that_holds_only_on_another_platform_is_not_the_pin(capsys, recorded, without):
    """Markers are evaluated for the image (Linux x86_64, each profile's Python): a macOS-only pin is not read."""
    recorded.text["sglang"] = _edit(
        recorded.text["sglang"],
        "Requires-Dist: torch==2.14.1\n",
        'Requires-Dist: torch==2.14.1; sys_platform == "linux"\n'
        'Requires-Dist: torch==2.2.0; sys_platform == "darwin"\n',
    )
    rc, out, err = track_add(capsys, without, VERSION, "--dry-run")
    assert rc == 0, err
    assert tomllib.loads(out)["tracks"][VERSION]["torch"]["version"] == "2.14.1"


def test_a_torch_build_without_cuda(capsys, recorded, without):
    name = "torch-2.14.1.dist-info/METADATA"
    recorded.text[name] = "".join(
        line + "\n" for line in recorded.text[name].splitlines() if "cuda-toolkit" not in line
    )
    assert "torch.pypi_cuda: torch 2.14.1" in _refused(capsys, without)
    assert "no CUDA runtime (a CPU build?)" in _refused(capsys, without)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("// no check here\n", "cxx_std: torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"),
        (
            "#if __cplusplus < 202302L\n#error C++23 or later compatible compiler is required to use ATen.\n#endif\n",
            "needs __cplusplus >= 202302L (C++23 or later compatible compiler is required to use ATen.); "
            "cxx_std takes 17, 20",
        ),
    ],
    ids=["no-check", "c++23"],
)
def test_a_cxx_standard_it_cannot_read(capsys, recorded, without, header, expected):
    recorded.text[track_facts.ATEN_HEADER] = header
    assert expected in _refused(capsys, without)


def test_a_yanked_torch_pin(capsys, recorded, without):
    for f in recorded.files["torch"]["2.14.1"]:
        f["yanked"] = True
    assert "torch.pypi_cuda: torch 2.14.1 is yanked on PyPI; pick another" in _refused(capsys, without)


def test_a_kernel_wheel_built_for_cuda_12(capsys, recorded, without):
    for lib in recorded.libraries.values():
        lib["needed"] = [n.replace("libcudart.so.13", "libcudart.so.12") for n in lib["needed"]]
        lib["toolkit"] = ["Cuda compilation tools, release 12.9, V12.9.86"]
    line = _refused(capsys, without)
    assert "sgl_kernel.install: PyPI's sglang-kernel 0.4.10 is a CUDA 12.9 build (cuda.version is 13.0.1)" in line


def test_a_kernel_wheel_without_sm_120a(capsys, recorded, without):
    for lib in recorded.libraries.values():
        lib["list_elf"] = lib["list_elf"].replace("sm_120a", "sm_100a")
    assert "sgl_kernel.install: PyPI's sglang-kernel 0.4.10 is without sm_120a SASS" in _refused(capsys, without)


def test_a_kernel_wheel_whose_cubins_disagree_with_what_it_links(capsys, recorded, without):
    for lib in recorded.libraries.values():
        lib["toolkit"] = ["Cuda compilation tools, release 12.9, V12.9.86"]
    line = _refused(capsys, without)
    wheel = "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl"
    assert f"sgl_kernel.pypi_cuda: {wheel} links libcudart.so.13 but its cubins say 'Cuda compilation" in line


def test_a_kernel_wheel_without_a_toolkit_note(capsys, recorded, without):
    for lib in recorded.libraries.values():
        lib["toolkit"] = []
    assert "no toolkit note (.note.nv.tkinfo); expected one CUDA release" in _refused(capsys, without)


def test_a_patch_that_conflicts(capsys, recorded, without):
    recorded.statuses["torch-symm-mem-sm120"] = "conflict"
    line = _refused(capsys, without)
    assert "patches: sglang 0.5.23: patch torch-symm-mem-sm120 conflicts" in line
    assert "write a variant for this release (patches/sglang/torch-symm-mem-sm120/)" in line


def test_a_patch_no_variant_covers_is_a_note_for_the_reviewer(capsys, recorded, without):
    recorded.statuses["kimi-k25-eagle3-delegation"] = "not applicable"
    rc, out, err = track_add(capsys, without, VERSION, "--dry-run")
    assert rc == 0, err
    assert "patches" not in tomllib.loads(out)["tracks"][VERSION]  # the variants' ranges choose, not the track
    assert "kimi-k25-eagle3-delegation not applicable;" in out
    assert "# Note: patch kimi-k25-eagle3-delegation is not applicable on sglang 0.5.23" in out


def test_rules_whose_range_holds_the_new_release_need_no_review(tmp_path):
    """On today's build.toml a 0.5.24 from 0.5.23 takes every rule 0.5.23 takes: nothing to review. A range that ends
    before 0.5.24 is marked, and only that one."""
    said = track_stanza.ranged_rules(REAL, "0.5.24", "0.5.23")
    assert len(said) == 1 and said[0].startswith("0.5.24 takes these rules of build.toml by their sglang range: ")
    taken = [(key, e.what) for key in cfg.RULES for e in getattr(REAL.tracks["0.5.23"], key)]
    assert said[0].count(" (") == len(taken) and all(what in said[0] for _, what in taken)
    ended = cfg.load(
        write_config(tmp_path, edit=lambda text: _edit(text, 'sglang = ">=0.5.16"', 'sglang = ">=0.5.16,<0.5.24"'))
    )
    said = track_stanza.ranged_rules(ended, "0.5.24", "0.5.23")
    assert said[1] == (
        "review: these held for 0.5.23, not for 0.5.24: runtime.4 torch-symm-mem (>=0.5.16,<0.5.24); widen a range "
        "where the rule still holds, or write an entry for 0.5.24"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([VERSION], 'already has [tracks."0.5.23"]'),
        (["0.5.x"], "VERSION '0.5.x' is not a version (like 0.5.23)"),
        (["0.6.0rc1"], "VERSION '0.6.0rc1' is a pre-release: a track is a final release"),
        (["0.5.24", "--from", "0.5.8"], f"no track for SGLang '0.5.8' (tracks: {track_list()}; perhaps you meant"),
    ],
    ids=["exists", "not-a-version", "pre-release", "unknown-from"],
)
def test_bad_arguments(capsys, recorded, tmp_path, args, expected):
    config = write_config(tmp_path)
    before = config.read_text()
    rc, _, err = run_cli(capsys, "track", "add", *args, "--config", str(config))
    assert rc == 2 and expected in err and len(err.strip().splitlines()) == 1, err
    assert config.read_text() == before


# ---------------------------------------------------------------------------------------------------
# The stanza as text: generic copy, insertion, the check before writing
# ---------------------------------------------------------------------------------------------------


def test_keys_it_does_not_derive_are_copied_whatever_they_are(recorded):
    """The --from track may grow tables (per-track mode presets, left-out paths): they are copied, marked."""
    derived = track_facts.derive(REAL, VERSION, recorded)
    source = {
        "flashinfer": "0.6.3",
        "flash_attn": "2.8.3",
        "cxx_std": 17,
        "torch": {"version": "2.9.1", "pypi_cuda": "12.8", "index_note": "kept"},
        "sgl_kernel": {"package": "sgl-kernel", "version": "0.3.21", "wheel": {"url": "https://x/y.whl"}},
        "modes": {"eagle3": {"spec_num_steps": 3, "spec_eagle_topk": 1, "spec_num_draft_tokens": 4}},
        "leave_out": [{"paths": ["/opt/venv/x"], "reason": "r1"}, {"paths": ["/opt/venv/y"], "reason": "r2"}],
        "runtime": [{"name": "a", "env": {"X": "1"}, "reason": "why"}],
    }
    data, copied = track_stanza.track_data(derived, source)
    assert set(copied) == {("flash_attn",), ("torch", "index_note"), ("modes",), ("leave_out",), ("runtime",)}
    assert "wheel" not in data["sgl_kernel"], "a pinned wheel of another kernel version is not copied"
    text = track_stanza.render(VERSION, data, derived, copied, "0.5.9")
    assert tomllib.loads(text)["tracks"][VERSION] == data
    assert f'[tracks."{VERSION}".modes.eagle3]' in text or f'[tracks."{VERSION}".modes]' in text
    review = 'review: copied from [tracks."0.5.9"]'
    for header in (f'[tracks."{VERSION}".modes]', f'[[tracks."{VERSION}".leave_out]]'):
        before = text.split(header, 1)[0].rstrip().splitlines()[-1]
        assert before.startswith(f"# {review}"), (header, before)


def test_a_header_inside_a_multi_line_value_is_not_a_table():
    text = '[tracks."1.0"]\nx = [\n  [1, 2]\n]\n# about the next table\n\n[other]\ny = "[tracks]"\n'
    assert tomllib.loads(text)
    assert track_stanza.track_span(text, "1.0") == (0, 4)
    inserted = track_stanza.insert(text, "1.0", '[tracks."2.0"]\nz = 1\n')
    assert tomllib.loads(inserted)["tracks"]["2.0"] == {"z": 1}
    assert inserted.startswith(text.split("# about")[0] + '\n[tracks."2.0"]\nz = 1\n# about the next table\n')


def test_a_stanza_that_does_not_check_out_is_not_written(tmp_path):
    config = write_config(tmp_path)
    before = config.read_text()
    broken = {"flashinfer": "0.7.2"}  # no torch, no sgl_kernel: the schema refuses it
    new = track_stanza.insert(before, "0.5.23", '[tracks."0.5.24"]\nflashinfer = "0.7.2"\n')
    with pytest.raises(UsageError, match=r'the new \[tracks."0.5.24"\] does not check out: .*missing key'):
        track_command.check_and_write(config, new, "0.5.24", broken, write=True)
    assert config.read_text() == before
    assert not list(tmp_path.glob(".build.toml.*"))
    # Text that changes more than the new track (here: a default) is refused before anything else.
    moved = new.replace('profile = "release"', 'profile = "offline"')
    with pytest.raises(CheckFailed, match=r"changed more of build\.toml than tracks\.0\.5\.24"):
        track_command.check_and_write(config, moved, "0.5.24", broken, write=True)
    assert config.read_text() == before


# ---------------------------------------------------------------------------------------------------
# The pieces it reads with
# ---------------------------------------------------------------------------------------------------


def _zip(members: dict[str, bytes], record: dict[str, bytes] | None = None) -> bytes:
    lines = [f"{name},sha256={wheel_members._digest(data)},{len(data)}" for name, data in (record or members).items()]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        archive.writestr("demo-1.0.dist-info/RECORD", "\n".join([*lines, "demo-1.0.dist-info/RECORD,,"]) + "\n")
    return buffer.getvalue()


@pytest.fixture
def remote(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A stand-in for remotezip: the wheel's bytes served as a local zip; counts what is opened."""
    monkeypatch.setenv("SGLANG_SM120_CACHE", str(tmp_path / "cache"))
    served: dict[str, Any] = {"bytes": b"", "opened": 0}

    def opener(url: str):
        served["opened"] += 1
        return zipfile.ZipFile(io.BytesIO(served["bytes"]))

    monkeypatch.setattr(wheel_members, "_open", opener)
    wheel = pypi.WheelFile("1.0", "demo-1.0-py3-none-any.whl", "https://pypi.invalid/demo.whl", "0" * 64, 1)
    return served, wheel


def test_a_member_is_read_checked_against_record_and_cached(remote):
    served, wheel = remote
    served["bytes"] = _zip({"demo/a.h": b"#define A 1\n"})
    path = wheel_members.member(wheel, "demo/a.h")
    assert path.read_bytes() == b"#define A 1\n"
    opened = served["opened"]
    assert wheel_members.member(wheel, "demo/a.h") == path and served["opened"] == opened, "read again"
    assert wheel_members.names(wheel) == ["demo/a.h"]
    path.write_bytes(b"corrupt")  # a cached member that does not match RECORD is fetched again
    assert wheel_members.member(wheel, "demo/a.h").read_bytes() == b"#define A 1\n"


def test_a_member_that_never_matches_record_names_what_to_delete(remote):
    served, wheel = remote
    served["bytes"] = _zip({"demo/a.h": b"what is served"}, record={"demo/a.h": b"what RECORD says"})
    with pytest.raises(CheckFailed, match=r"demo/a.h does not match the sha256 its RECORD gives.*delete .*members"):
        wheel_members.member(wheel, "demo/a.h")
    with pytest.raises(CheckFailed, match=r"has no member 'demo/b\.h'"):
        wheel_members.member(wheel, "demo/b.h")


def test_dt_needed_is_read_from_a_real_elf_file():
    import _ctypes

    found = elf.needed(Path(_ctypes.__file__))
    assert any(name.startswith("libc.so") or name.startswith("libffi") for name in found), found
    assert elf.TOOLKIT.search(b"\x00ptxas\x00Cuda compilation tools, release 13.0, V13.0.88\x00").group(0)


# ---------------------------------------------------------------------------------------------------
# track next, track check (their plumbing; the T1 tests run them on the real releases)
# ---------------------------------------------------------------------------------------------------


def _release(version: str, *, yanked: bool = False) -> list[dict[str, Any]]:
    name = f"sglang-{version}-py3-none-any.whl"
    return [{"filename": name, "url": name, "digests": {"sha256": "0" * 64}, "size": 1, "yanked": yanked}]


@pytest.mark.parametrize(
    ("releases", "expected"),
    [
        ({"0.5.23": _release("0.5.23"), "0.5.24rc0": _release("0.5.24rc0"), "0.5.24": _release("0.5.24")}, "0.5.24\n"),
        (
            {"0.5.23": _release("0.5.23"), "0.5.24": _release("0.5.24"), "0.5.25": _release("0.5.25", yanked=True)},
            "0.5.24\n",
        ),
        ({"0.5.23": _release("0.5.23"), "0.5.24.dev1": _release("0.5.24.dev1")}, ""),
    ],
    ids=["newest-final", "yanked-skipped", "none"],
)
def test_track_next_names_the_newest_final_release_newer_than_the_newest_track(capsys, monkeypatch, releases, expected):
    monkeypatch.setattr(pypi, "all_releases", lambda: releases)
    rc, out, err = run_cli(capsys, "track", "next")
    assert rc == 0 and out == expected, err
    if not expected:
        assert "no final SGLang release on PyPI is newer than 0.5.23, the newest track" in err


@pytest.fixture
def t1(monkeypatch: pytest.MonkeyPatch):
    """track check with its two steps replaced: what it ran, and the pytest status to answer."""
    from sm120.track import cmd_track as track_command
    from sm120.verify import runner

    ran: dict[str, Any] = {"status": 0}
    monkeypatch.setattr(track_command.cmd_patches, "check", lambda config, version: ran.setdefault("patches", version))

    def pytest_run(cmd, env):
        ran["cmd"] = cmd
        return ran["status"]

    monkeypatch.setattr(runner, "_run_pytest", pytest_run)
    return ran


def test_track_check_runs_patches_check_then_that_tracks_t1_tests(capsys, t1):
    rc, _, err = run_cli(capsys, "track", "check", "0.5.23", "-k", "kimi")
    assert rc == 0, err
    assert t1["patches"] == "0.5.23"
    assert t1["cmd"][1:3] == ["-m", "pytest"] and t1["cmd"][3] == str(cfg.ROOT / "tests" / "upstream")
    assert "--sglang-track=0.5.23" in t1["cmd"] and t1["cmd"][-2:] == ["-k", "kimi"]
    assert "track check 0.5.23: passed" in err


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (1, "the T1 checks of track 0.5.23 failed (pytest exit status 1; see above)"),
        (5, "no T1 test was selected for track 0.5.23"),
    ],
)
def test_track_check_fails_when_its_tests_do(capsys, t1, status, expected):
    t1["status"] = status
    rc, _, err = run_cli(capsys, "track", "check", "0.5.23")
    assert rc == 1 and err.strip().splitlines()[-1] == f"build.py track: failed: {expected}", err


def test_track_check_refuses_what_it_cannot_check(capsys, t1, monkeypatch, tmp_path):
    rc, _, err = run_cli(capsys, "track", "check", "0.5.8")
    assert rc == 2 and "no track for SGLang '0.5.8'" in err and "cmd" not in t1
    from sm120.track import cmd_track as track_command

    monkeypatch.setattr(track_command, "T1_TESTS", tmp_path / "tests" / "upstream")
    rc, _, err = run_cli(capsys, "track", "check", "0.5.23")
    assert rc == 2 and "which this copy lacks: run it in a checkout" in err


def test_a_version_without_a_track_points_to_track_add(capsys):
    rc, _, err = run_cli(capsys, "plan", "--sglang", "0.5.10")
    assert rc == 2 and err.strip().endswith("pick one, or add it: python3 build.py track add 0.5.10"), err
    rc, _, err = run_cli(capsys, "plan", "--sglang", "0.5.10rc1")  # track add takes final releases only
    assert rc == 2 and err.strip().endswith("pick one"), err
