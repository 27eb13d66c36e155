"""build.toml loading: the real file is valid, and every kind of bad input is one clear UsageError."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sm120.errors import UsageError
from sm120.plan import config as cfg
from tests.helpers import write_config

ROOT = Path(__file__).resolve().parents[2]


def test_real_build_toml_loads():
    config = cfg.load(ROOT / "build.toml")
    assert config.cuda.version == "13.0.1"
    assert config.cuda.archs == ["12.0"]
    assert config.defaults.sglang in config.tracks
    assert {"0.5.9", "0.5.23"} <= set(config.tracks)
    assert {"release", "offline"} <= set(config.profiles)
    assert config.defaults.sglang == "0.5.23"  # the newest release is the default track
    # The EAGLE-3 draft tree per track: 0.5.9 the reference run's 2/4/16, 0.5.23 SGLang's own choice.
    reference = config.tracks["0.5.9"].presets["eagle3"]
    assert (reference.spec_num_steps, reference.spec_eagle_topk, reference.spec_num_draft_tokens) == (2, 4, 16)
    newest = config.tracks["0.5.23"].presets["eagle3"]
    assert (newest.spec_num_steps, newest.spec_eagle_topk, newest.spec_num_draft_tokens) == (None, None, None)
    assert "_auto_choose_speculative_params" in newest.reason


def test_track_pins_match_findings():
    config = cfg.load(ROOT / "build.toml")
    old, new = config.tracks["0.5.9"], config.tracks["0.5.23"]
    assert (old.torch.version, old.sgl_kernel.package, old.sgl_kernel.version, old.flashinfer, old.flash_attn) == (
        "2.9.1",
        "sgl-kernel",
        "0.3.21",
        "0.6.3",
        "2.8.3",
    )
    assert (new.torch.version, new.sgl_kernel.package, new.sgl_kernel.version, new.flashinfer, new.flash_attn) == (
        "2.14.1",
        "sglang-kernel",
        "0.4.10",
        "0.7.2",
        "2.8.3",
    )


def one_line_error(path: Path) -> str:
    with pytest.raises(UsageError) as info:
        cfg.load(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file(tmp_path):
    assert "no such file" in one_line_error(tmp_path / "nope.toml")


def test_malformed_toml(tmp_path):
    message = one_line_error(write_config(tmp_path, text="[project\nname = 1"))
    assert message.startswith(str(tmp_path / "build.toml")) and "not valid TOML" in message


def test_unknown_top_level_section(tmp_path):
    message = one_line_error(write_config(tmp_path, edit=lambda s: s + "\n[surprise]\nx = 1\n"))
    assert "unknown key surprise" in message and "allowed:" in message and "tracks" in message


def test_typo_in_a_track_names_the_key_and_the_allowed_ones(tmp_path):
    message = one_line_error(
        write_config(tmp_path, edit=lambda s: s.replace('flashinfer = "0.6.3"', 'flashinfr = "0.6.3"'))
    )
    assert 'tracks."0.5.9".flashinfr' in message
    assert "flashinfer" in message.split("allowed:")[1]


def test_typo_in_a_nested_table(tmp_path):
    message = one_line_error(
        write_config(tmp_path, edit=lambda s: s.replace('pypi_cuda = "12.8"', 'pypi_cud = "12.8"'))
    )
    assert 'tracks."0.5.9".torch.pypi_cud' in message
    assert "pypi_cuda" in message


def test_wrong_type(tmp_path):
    message = one_line_error(write_config(tmp_path, edit=lambda s: s.replace("uid = 1000", 'uid = "root"')))
    assert "image.uid" in message and "'root'" in message


def test_bad_arch(tmp_path):
    message = one_line_error(write_config(tmp_path, edit=lambda s: s.replace('archs = ["12.0"]', 'archs = ["sm_120"]')))
    assert "cuda.archs" in message and "compute capability" in message


def test_missing_patch_file(tmp_path):
    path = write_config(tmp_path)
    victim = tmp_path / "patches/sglang/kimi-k25-eagle3-delegation/0.5.9.patch"
    victim.unlink()
    message = one_line_error(path)
    assert "kimi-k25-eagle3-delegation" in message and "no such file" in message


def test_each_track_takes_the_rules_written_once_whose_range_holds_its_version():
    config = cfg.load(ROOT / "build.toml")
    old, new = config.tracks["0.5.9"], config.tracks["0.5.23"]
    assert [r.name for r in old.runtime] == ["no-jit-deepgemm", "nvfp4-quantization", "torch-symm-mem"]
    assert [r.name for r in new.runtime] == ["nvfp4-moe-cutlass", "torch-symm-mem"]
    assert old.runtime[-1].sglang == "<0.5.16" and new.runtime[-1].env == {"SGLANG_OPT_USE_INKLING_CUSTOM_AR": "0"}
    assert old.left_out == new.left_out == config.left_out  # one entry, every release
    shared = [n for n in config.not_shipped if n.sglang is None]
    assert [n.paths[0] for n in shared] == ["nvidia/cu13/lib/libnvrtc.alt.so*", "sgl_kernel/sm90"]
    assert all(n in old.not_shipped and n in new.not_shipped for n in shared)
    assert old.patches == new.patches == list(config.patches)  # the variants' ranges choose the file, or none
    # Resolved, not written: a track's dump (what `track add` would copy) holds none of them.
    assert not {"patches", "runtime", "left_out", "not_shipped"} & set(old.model_dump())


def test_the_same_path_for_two_cuda_majors_is_no_clash(tmp_path):
    config = cfg.load(write_config(tmp_path, edit=lambda s: s.replace("nvidia/cuda_nvrtc/lib/", "nvidia/cu13/lib/")))
    paths = [n.paths[0] for n in config.tracks["0.5.9"].not_shipped]
    assert paths.count("nvidia/cu13/lib/libnvrtc.alt.so*") == 2  # torch_cuda 12 and 13: one of them per build


@pytest.mark.parametrize(
    ("key", "line"),
    [("defaults.profile", '\nprofile = "offline"'), ("project.published_profile", '\npublished_profile = "release"')],
)
def test_default_and_published_profiles_must_exist(tmp_path, key, line):
    message = one_line_error(write_config(tmp_path, edit=lambda s: s.replace(line, line.split('"')[0] + '"prod"')))
    assert f"{key} = 'prod'" in message and "offline, release" in message


def test_bad_version_range(tmp_path):
    message = one_line_error(
        write_config(tmp_path, edit=lambda s: s.replace('versions = ">=0.5.14"', 'versions = "0.5.14+"'))
    )
    assert "version range" in message


def test_unknown_track_and_profile_lookups():
    config = cfg.load(ROOT / "build.toml")
    with pytest.raises(UsageError, match=re.escape("no track for SGLang '9.9.9'")):
        config.track("9.9.9")
    with pytest.raises(UsageError, match="unknown profile 'nightly'"):
        config.profile("nightly")
