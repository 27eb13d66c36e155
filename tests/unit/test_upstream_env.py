"""T0: how the T1 venvs are specified (requirements from a release's Requires-Dist) and the sgl_kernel stand-in."""

from __future__ import annotations

import importlib
import sys
from unittest import mock

import pytest
from packaging.markers import default_environment

from sm120.errors import UsageError
from sm120.verify import sgl_kernel_standin as upstream_stubs
from tests.upstream import env as upstream_env

ENV = {**default_environment(), "python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"}

REQUIRES_059 = [
    "IPython",
    "torch==2.9.1",
    "transformers==4.57.1",
    "openai==2.6.1",
    "pyzmq>=25.1.2",
    'decord2; sys_platform == "linux" and platform_machine == "aarch64"',
    'av; sys_platform == "linux" and platform_machine == "aarch64"',
    "sentencepiece",
    'pytest; extra == "test"',
    'compressed-tensors==9.9; extra == "test"',
]


def test_requirements_take_the_releases_pins_and_the_tracks_torch():
    reqs = upstream_env._requirements("0.5.9", REQUIRES_059, "2.9.1", ENV)
    assert "torch==2.9.1" in reqs
    assert "transformers==4.57.1" in reqs
    assert "openai==2.6.1" in reqs
    assert "pyzmq>=25.1.2" in reqs
    # Not pinned by the release: the bare name. Pinned only under an extra: ignored.
    assert "compressed-tensors" in reqs
    assert "IPython" in reqs
    # Only the listed dependencies, never the release's whole Requires-Dist.
    assert not any(r.startswith(("pytest", "decord2", "av")) for r in reqs)
    assert len(reqs) == len(upstream_env.DEPENDENCIES) + 1


def test_markers_are_evaluated_for_the_venvs_platform():
    requires = ['einops==1.0; platform_machine == "aarch64"', 'einops==2.0; platform_machine == "x86_64"']
    assert "einops==2.0" in upstream_env._requirements("0.5.9", requires, "2.9.1", ENV)


def test_a_track_whose_torch_differs_from_the_release_pin_is_refused():
    with pytest.raises(UsageError, match=r"torch\.version = '2\.9\.0' but sglang 0\.5\.9 requires torch==2\.9\.1"):
        upstream_env._requirements("0.5.9", REQUIRES_059, "2.9.0", ENV)


def test_no_track_means_the_releases_own_torch_pin():
    assert "torch==2.9.1" in upstream_env._requirements("0.5.9", REQUIRES_059, None, ENV)
    with pytest.raises(UsageError, match="does not pin torch"):
        upstream_env._requirements("0.5.99", ["numpy"], None, ENV)


def test_inputs_change_with_the_dependency_list(monkeypatch):
    before = upstream_env.inputs_for("0.5.9")
    assert before["torch"] == "2.9.1" and before["sglang"] == "0.5.9"
    monkeypatch.setattr(upstream_env, "DEPENDENCIES", (*upstream_env.DEPENDENCIES, "extra-package"))
    assert upstream_env.inputs_for("0.5.9") != before


def test_inputs_refuse_a_non_version():
    with pytest.raises(UsageError, match="not an SGLang version"):
        upstream_env.inputs_for("latest")


def uninstall(finder) -> None:
    """Take the stand-in out of this test process again (the image and T1 never need to)."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
    for name in list(sys.modules):
        if finder._covers(name):
            del sys.modules[name]


@pytest.fixture
def stub():
    finder = upstream_stubs.install()
    yield finder
    uninstall(finder)


def test_stub_hands_out_modules_and_attributes(stub):
    kernel = importlib.import_module("sgl_kernel")
    from sgl_kernel import bmm_fp8  # what SGLang's modules do at import time
    from sgl_kernel.flash_attn import flash_attn_varlen_func

    assert isinstance(bmm_fp8, mock.MagicMock)
    assert isinstance(flash_attn_varlen_func, mock.MagicMock)
    assert getattr(kernel, "__stub__", False) is True
    assert "sgl_kernel.flash_attn" in stub.imported
    # Dunder lookups are real misses: hasattr(mod, "__file__")-style probes do not get a mock.
    assert not hasattr(kernel, "__wrapped__")


def test_stub_leaves_other_modules_alone(stub):
    assert importlib.import_module("json").__name__ == "json"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sgl_kernel_not_this_one")


def test_uninstall_removes_the_stand_in():
    finder = upstream_stubs.install()
    importlib.import_module("sgl_kernel")
    uninstall(finder)
    assert "sgl_kernel" not in sys.modules
    assert finder not in sys.meta_path
