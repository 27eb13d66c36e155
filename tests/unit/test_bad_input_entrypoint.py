"""T0: SM120_SYMM_MEM_MAX_SIZES that the torch-symm-mem-sm120 patch would ignore (a warning minutes into the start,
the built-in limits kept) is refused by the entrypoint before anything loads, --dry-run included (issue 35,
class 5): one line and exit 2 naming the value. The entrypoint reads it with the sweep's own size parser
(sm120/image/allreduce/sizes.py `parse_limits`), which refuses every value the patch's behaviour snippet shows the
patch refusing (sm120/verify/behaviour.py BAD_MAX_SIZES) and takes the ones it honours."""

from __future__ import annotations

import pytest

from sm120.image.allreduce import sizes
from sm120.verify.behaviour import BAD_MAX_SIZES
from tests.entrypoint_helpers import run_entrypoint, standin_run, stderr_lines

KiB, MiB = sizes.KiB, sizes.MiB

DRY_RUN = [
    # (id, value, exit status, the one line on stderr holds)
    ("unit-mb", "8:4MB", 2, "SM120_SYMM_MEM_MAX_SIZES='8:4MB': '4MB' is not a size"),
    ("tp-twice", "2:512KiB,2:1MiB", 2, "TP 2 is given twice"),
    ("above-the-bound", "8:1024MiB", 2, "1024MiB is out of range (4KiB to 512MiB)"),
    ("below-the-bound", "8:2KiB", 2, "2KiB is out of range (4KiB to 512MiB)"),
    ("no-tp", "16MiB", 2, "'16MiB' is not TP:SIZE"),
    ("empty-entry", "2:1MiB,,8:4MiB", 2, "'' is not TP:SIZE"),
    ("huge-number", "8:" + "9" * 5000 + "MiB", 2, "is not a size"),  # shown cut short
    ("good", "2:512KiB,8:32MiB", 0, None),
    ("spaces", " 2:512K, 8:32M ", 0, None),
    ("blank", "  ", 0, None),  # unset, as the patch reads it
]


@pytest.mark.parametrize(("value", "code", "expected"), [c[1:] for c in DRY_RUN], ids=[c[0] for c in DRY_RUN])
def test_a_limit_the_patch_would_ignore_is_refused_at_dry_run(tmp_path, value, code, expected):
    run = standin_run(tmp_path, SM120_SYMM_MEM_MAX_SIZES=value)
    proc = run_entrypoint(["baseline", "--dry-run"], run["env"])
    assert proc.returncode == code and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-1500:])
    if expected is not None:
        lines = stderr_lines(proc)
        assert len(lines) == 1 and lines[0].startswith("entrypoint: error: SM120_SYMM_MEM_MAX_SIZES="), lines
        assert expected in lines[0] and lines[0].endswith("; the patch would ignore it"), lines
        assert len(lines[0]) < 500, lines


@pytest.mark.parametrize("name", sorted(BAD_MAX_SIZES))
def test_what_the_patch_refuses_the_parser_refuses(name):
    with pytest.raises(sizes.SizeError):
        sizes.parse_limits(BAD_MAX_SIZES[name])


HONOURED = [
    ("2:512KiB", {2: 512 * KiB}),
    (" 2:512K, 8:32M ", {2: 512 * KiB, 8: 32 * MiB}),
    ("2:512KiB,8:1MiB", {2: 512 * KiB, 8: MiB}),
    ("4:4K,8:512M", {4: 4 * KiB, 8: 512 * MiB}),
]


@pytest.mark.parametrize(("value", "limits"), HONOURED, ids=[c[0].strip() for c in HONOURED])
def test_what_the_patch_honours_the_parser_takes(value, limits):
    assert sizes.parse_limits(value) == limits
