"""T0: the pieces of `build.py verify` that need no image: labels, cuobjdump and ldd parsing, the table, JUnit
outcomes, and bad input (exit 2 in one line)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from sm120.plan import exported, labels
from sm120.plan import resolve as planmod
from sm120.verify import elf, report
from tests.helpers import run_build_py


def plan_labels(profile: str, sglang: str = "0.5.9") -> dict[str, str]:
    return dict(planmod.load_plan(profile=profile, sglang=sglang).labels)


@pytest.mark.parametrize("profile", ["offline", "release"])
@pytest.mark.parametrize("sglang", ["0.5.9", "0.5.23"])
def test_the_plans_labels_parse(profile: str, sglang: str):
    """Every label the suite reads is one the plan writes (the contract between build and verify)."""
    expect = labels.parse(plan_labels(profile, sglang))
    assert expect.cuda_archs == ["sm_120"]
    assert expect.sgl_kernel_required == ["sm_120a"]
    assert expect.flash_attn_archs == ["sm_120"]
    assert expect.sglang == sglang and expect.profile == profile
    assert {p.name for p in expect.patches} >= {"torch-symm-mem-sm120"}
    assert expect.port == 30000 and expect.user == "sglang"


def test_flash_attn_subset_from_kernel_names():
    fwd = "_ZN5flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128ELi128ELi64ELi4ELb0ELb0EN7cutlass10bfloat16_tE"
    bwd = "_ZN5flash25flash_bwd_dq_dk_dv_loop_kernelI23Flash_bwd_kernel_traitsILi64ELi128EN7cutlass6half_tE"
    split = "_ZN5flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi128ELi64ELi128ELi4ELb0EN7cutlass6half_tE"
    assert elf.flash_attn_subset([fwd]) == ([128], ["bf16"], False, False)
    assert elf.flash_attn_subset([fwd, bwd, split]) == ([64, 128], ["bf16", "fp16"], True, True)
    label = "head_dims=128;dtypes=bf16;backward=off;split_kv=off"
    assert exported.parse_kernels(label) == exported.Kernels([128], ["bf16"], False, False)
    for bad in ("head_dims=all;dtypes=bf16;backward=maybe;split_kv=on", "head_dims=128;dtypes=bf16;backward=off"):
        with pytest.raises(labels.LabelError):
            exported.parse_kernels(bad)


def test_missing_and_malformed_labels():
    good = plan_labels("offline")
    assert labels.missing(good) == []
    assert labels.missing({}) == [f"sglang-sm120.{k}" for k in labels.REQUIRED]
    with pytest.raises(labels.LabelError, match=r"sglang-sm120\.port"):
        labels.parse({**good, "sglang-sm120.port": "http"})
    with pytest.raises(labels.LabelError, match="NAME@sha256:HEX"):
        labels.parse({**good, "sglang-sm120.patches": "kimi@md5:00"})


LIST_ELF = """\
ELF file    1: common_ops.abi3.1.sm_80.cubin
ELF file    2: common_ops.abi3.2.sm_90a.cubin
ELF file    3: common_ops.abi3.3.sm_120a.cubin
ELF file    4: common_ops.abi3.4.sm_89.cubin
ELF file    5: common_ops.abi3.5.sm_100a.cubin
ELF file    6: common_ops.abi3.6.sm_90.cubin
ELF file    7: common_ops.abi3.7.sm_120a.cubin
"""


def test_list_elf_parsing_sorts_archs_by_number():
    assert elf.parse_list_elf(LIST_ELF) == ["sm_80", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120a"]
    assert elf.parse_list_elf("") == []


def test_library_names():
    assert elf.library_name("flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so") == "flash_attn_2_cuda"
    assert elf.library_name("sgl_kernel/sm100/common_ops.abi3.so") == "sgl_kernel/sm100/common_ops"
    assert elf.library_name("lib/mscclpp.so.0.6.0") == "lib/mscclpp.so.0.6.0"
    assert elf.library_name("_mscclpp.cpython-310-x86_64-linux-gnu.so") == "_mscclpp"


LDD = """\
/opt/venv/a.so:
\tlinux-vdso.so.1 (0x00007ffd)
\tlibcuda.so.1 => not found
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)
/opt/venv/b.so:
\tlibnvidia-ml.so.1 => not found
\tlibcudart.so.12 => not found
/opt/venv/c.so:
\tstatically linked
"""


def test_ldd_parsing_and_the_driver_allow_list():
    missing = elf.unresolved(LDD)
    assert missing == {"/opt/venv/a.so": ["libcuda.so.1"], "/opt/venv/b.so": ["libnvidia-ml.so.1", "libcudart.so.12"]}
    names = missing["/opt/venv/b.so"] + missing["/opt/venv/a.so"]
    assert [n for n in names if elf.DRIVER_LIBRARY.match(n)] == ["libnvidia-ml.so.1", "libcuda.so.1"]
    assert [n for n in names if not elf.DRIVER_LIBRARY.match(n)] == ["libcudart.so.12"]
    # The runtime libraries an image must bring are never excused.
    for name in ("libcudart.so.13", "libnvrtc.so.12", "libcublas.so.13", "libnuma.so.1", "libcudnn.so.9"):
        assert not elf.DRIVER_LIBRARY.match(name), name


SITE = "/opt/venv/lib/python3.11/site-packages"


def test_unresolved_libraries_are_sorted_into_allowed_and_broken():
    unresolved = {
        f"{SITE}/sgl_kernel/sm100/common_ops.abi3.so": ["libcuda.so.1"],
        f"{SITE}/torchaudio/lib/_torchaudio.so": ["libtorchaudio.so"],  # loaded first by torchaudio itself
        f"{SITE}/nvidia/nvshmem/lib/nvshmem_transport_ucx.so.3": ["libucp.so.0", "libucs.so.0"],
        f"{SITE}/torchcodec/libtorchcodec_core7.so": ["libavcodec.so.61"],
        f"{SITE}/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so": ["libc10.so"],  # nobody provides it: broken
        f"{SITE}/nvidia/nvshmem/lib/libnvshmem_host.so.3": ["libmlx5.so.1"],  # not a plugin: broken
    }
    files = [f"{SITE}/torchaudio/lib/libtorchaudio.so", f"{SITE}/torch/lib/libc10_cuda.so", *unresolved]
    found = elf.classify(unresolved, files, SITE)
    assert found.driver == {"libcuda.so.1"}
    assert found.in_package == {f"{SITE}/torchaudio/lib/_torchaudio.so": ["libtorchaudio.so"]}
    assert sorted(found.broken) == [
        f"{SITE}/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so",
        f"{SITE}/nvidia/nvshmem/lib/libnvshmem_host.so.3",
    ]
    optional = {path for files in found.optional.values() for path in files}
    assert optional == {
        f"{SITE}/nvidia/nvshmem/lib/nvshmem_transport_ucx.so.3",
        f"{SITE}/torchcodec/libtorchcodec_core7.so",
    }


def test_cuobjdump_from_the_pinned_wheel_reads_a_cubin_list(tmp_path: Path):
    """The pinned wheel's cuobjdump runs here, and answers 'no device code' for a host-only library."""
    tool = elf.cuobjdump()
    assert subprocess.run([tool, "--version"], capture_output=True, text=True, check=True).stdout
    host_only = Path("/bin/true") if Path("/bin/true").exists() else Path("/usr/bin/true")
    assert elf.sass_archs(host_only, tool) == elf.Sass([], False)


def test_table_and_arch_lines():
    r = report.Report(
        image="sglang-sm120:x",
        image_id="sha256:" + "ab" * 32,
        size=12 * 2**30,
        profile="offline",
        python="3.11.2",
        expected={"torch": "2.9.1", "sglang": "0.5.9"},
        found={"torch": "2.9.1+cu128"},
        kernels=[{"library": "flash_attn_2_cuda", "archs": ["sm_120"]}, {"library": "x/y", "archs": []}],
    )
    text = report.table(r)
    assert "sglang-sm120:x (abababababab, 12.0 GiB)" in text
    assert "2.9.1+cu128" in text and "flash_attn_2_cuda" in text
    assert report.arch_line(r.kernels[0]) == "flash_attn_2_cuda: sm_120"
    assert report.arch_line(r.kernels[1]) == "x/y: no device code"
    # What was not measured prints as '?', never as the label's value.
    assert re.search(r"^sgl_kernel\s+\?\s+\?$", text, re.MULTILINE), text
    assert re.search(r"^sglang\s+0\.5\.9\s+\?$", text, re.MULTILINE), text


def test_junit_outcome(tmp_path: Path):
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="sm120.verify.suite.test_hygiene" name="test_a"/>'
        '<testcase classname="sm120.verify.suite.test_hygiene" name="test_b"><failure message="x"/></testcase>'
        '<testcase classname="sm120.verify.suite.test_jit" name="test_c"><error message="y"/></testcase>'
        '<testcase classname="sm120.verify.suite.test_gpu" name="test_d"><skipped message="no GPU"/></testcase>'
        "</testsuite></testsuites>"
    )
    out = report.junit_outcome(xml)
    assert out == report.Outcome(tests=4, failed=["test_hygiene::test_b", "test_jit::test_c"], skipped=1)
    assert report.junit_outcome(tmp_path / "absent.xml") is None


def test_verify_needs_an_image():
    proc = run_build_py("verify")
    assert proc.returncode == 2
    assert "--image" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("found", "label", "same"),
    [
        ("0.3.21+cu130", "0.3.21", True),  # upstream's CUDA 13 build under a PyPI pin's label
        ("0.3.21", "0.3.21", True),
        ("0.3.21+cu130", "0.3.21+cu130", True),  # a pinned wheel's own version
        ("0.3.21", "0.3.21+cu130", False),  # PyPI's build where the plan pinned upstream's +cu130 one
        ("0.3.21+cu129", "0.3.21+cu130", False),
        ("0.3.22+cu130", "0.3.21", False),
        ("0.3.21.post1", "0.3.21", False),
        ("0.4.10", "0.4.10.0", True),  # PEP 440 equality, not text
    ],
)
def test_a_version_label_means_the_public_version_and_a_pinned_local_part(found, label, same):
    assert labels.is_labelled_version(found, label) is same
