"""T0: build.toml says what cannot work (issue 15, class 5): `plan` refuses, naming the key, EAGLE-3 presets
outside the draft tree's bound, a missing mode the image's CMD runs, a patch outside the repository, a rule that holds
for no track or two that clash on one, strings or booleans where numbers go (strict types), non-finite numbers; an
unknown key or value names the allowed ones and the closest. One line, exit 2, no traceback."""

from __future__ import annotations

import pytest

from sm120.errors import UsageError
from sm120.plan import config as cfg
from tests.helpers import ROOT, run_build_py, run_cli, track_list, write_config

RUNTIME_059 = '[tracks."0.5.9".torch]'
LEFT_OUT = '[[left_out]]\nargs = ["--enable-flashinfer-allreduce-fusion"]'
NEWEST = max(cfg.load().tracks, key=lambda v: tuple(int(p) for p in v.split(".")))
FA_FILE = 'file = "patches/flash-attn/2.8.3/kernel-subset.patch"'

# id, text in build.toml, its replacement, what the one line must say
CASES: list[tuple[str, str, str, list[str]]] = [
    # EAGLE-3 presets: draft tokens from 2 to 1 + top-k + (steps - 1) * top-k^2
    (
        "draft-above-bound",
        "spec_num_draft_tokens = 16",
        "spec_num_draft_tokens = 22",
        ['tracks."0.5.9".presets.eagle3.spec_num_draft_tokens = 22', "allowed 2 to 21"],
    ),
    (
        "draft-below-2",
        "spec_num_draft_tokens = 16",
        "spec_num_draft_tokens = 1",
        ['tracks."0.5.9".presets.eagle3.spec_num_draft_tokens = 1', "from 2"],
    ),
    (
        "steps-1-bound",
        "spec_num_steps = 2",
        "spec_num_steps = 1",
        ['tracks."0.5.9".presets.eagle3.spec_num_draft_tokens = 16', "allowed 2 to 5"],
    ),
    ("topk-1-bound", "spec_eagle_topk = 4", "spec_eagle_topk = 1", ["allowed 2 to 3"]),
    (
        "spec-without-draft",
        '[tracks."0.5.9".presets.eagle3]',
        '[tracks."0.5.9".presets.baseline]',
        ['tracks."0.5.9".presets.baseline: the mode has draft = false'],
    ),
    (
        "spec-unknown-mode",
        '[tracks."0.5.9".presets.eagle3]',
        '[tracks."0.5.9".presets.eagle]',
        ['tracks."0.5.9".presets.eagle: no such mode', "perhaps you meant 'eagle3'"],
    ),
    (
        "spec-part-of-the-tree",
        "spec_eagle_topk = 4\n",
        "",
        [
            'tracks."0.5.9".presets.eagle3 sets spec_num_steps, spec_num_draft_tokens but not spec_eagle_topk',
            "all three",
        ],
    ),
    (
        "spec-without-reason",
        '[tracks."0.5.23".presets.eagle3]\nreason = ',
        '[tracks."0.5.23".presets.eagle3]\nreasons = ',
        ['unknown key tracks."0.5.23".presets.eagle3.reasons', "perhaps you meant 'reason'"],
    ),
    ("mode-name", "[modes.eagle3]", '[modes."-x"]', ["[modes.-x]: a mode name is"]),
    # the image's CMD
    ("default-mode-missing", "[modes.baseline]", "[modes.plain]", ["defaults.mode = 'baseline' is not a mode"]),
    (
        "default-mode-not-the-cmd",
        'mode = "baseline"',
        'mode = "eagle3"',
        ["defaults.mode = 'eagle3', but the image's CMD runs 'baseline'", "the same mode"],
    ),
    # the rules written once, by SGLang version range
    (
        "track-names-patches",
        RUNTIME_059,
        'patches = ["torch-symm-mem-sm120"]\n\n' + RUNTIME_059,
        ['tracks."0.5.9": patches is not a track key', "every [patches.NAME] applies where a variant's range holds"],
    ),
    (
        "track-has-a-rule",
        RUNTIME_059,
        '[[tracks."0.5.9".runtime]]\nname = "x"\nenv = { X = "1" }\nreason = "r"\n\n' + RUNTIME_059,
        ['tracks."0.5.9": runtime is not a track key: write each entry once as [[runtime]] with sglang = a range'],
    ),
    (
        "rule-for-no-track",
        'sglang = "<0.5.10"\nname = "no-jit-deepgemm"',
        'sglang = "<0.5.5"\nname = "no-jit-deepgemm"',
        [f"runtime.0.sglang = '<0.5.5' holds for no track (tracks: {track_list()}): widen the range, or remove"],
    ),
    (
        "rule-range-garbled",
        'sglang = "<0.5.10"\nname = "no-jit-deepgemm"',
        'sglang = "0.5.10-"\nname = "no-jit-deepgemm"',
        ["runtime.0.sglang = '0.5.10-'", "is not a version range like '>=0.5.9,<0.5.14'"],
    ),
    (
        "rule-ranges-overlap",
        'sglang = "<0.5.16"\nname = "torch-symm-mem"',
        'sglang = "<0.5.24"\nname = "torch-symm-mem"',
        [
            "runtime.4 (sglang = '>=0.5.16'): two runtime rules of track 0.5.23 are named 'torch-symm-mem' "
            "(runtime.3 is the other): narrow their sglang ranges so that no track takes both"
        ],
    ),
    (
        "flag-left-out-twice",
        LEFT_OUT,
        '[[left_out]]\nsglang = "==0.5.9"\nargs = ["--x", "--enable-flashinfer-allreduce-fusion"]\nreason = "r"\n\n'
        + LEFT_OUT,
        [
            "left_out.1 (no sglang: every release): two left_out entries of track 0.5.9 leave out "
            "'--enable-flashinfer-allreduce-fusion' (left_out.0 is the other)"
        ],
    ),
    (
        "path-not-shipped-twice",
        'paths = ["sgl_kernel/flash_ops.abi3.so"]',
        'paths = ["sgl_kernel/flash_ops.abi3.so", "sgl_kernel/sm90"]',
        ["two not_shipped entries of track 0.5.23 leave out 'sgl_kernel/sm90' (not_shipped.6 is the other)"],
    ),
    (
        "patch-variants-overlap",
        'versions = ">=0.5.14"',
        'versions = ">=0.5.9"',
        ["patches.torch-symm-mem-sm120.variants.0 and .1 hold for sglang 0.5.9 (track 0.5.9): give each release one"],
    ),
    # patches
    (
        "patch-outside-dotdot",
        FA_FILE,
        'file = "../outside.patch"',
        ["variants.0.file = '../outside.patch'", "outside the repository"],
    ),
    (
        "patch-outside-absolute",
        FA_FILE,
        'file = "/etc/hostname"',
        ["variants.0.file = '/etc/hostname'", "outside the repository"],
    ),
    (
        "requires-patch-typo",
        'requires_patch = "torch-symm-mem-sm120"',
        'requires_patch = "torch-symm-mem-sm12"',
        ["requires_patch: unknown patch 'torch-symm-mem-sm12'", "perhaps you meant 'torch-symm-mem-sm120'"],
    ),
    # strict types: no silent coercion
    ("port-string", "port = 30000", 'port = "30000"', ["image.port = '30000'", "strict"]),
    ("port-bool", "port = 30000", "port = true", ["image.port = True", "strict"]),
    ("port-float", "port = 30000", "port = 30000.0", ["image.port = 30000.0"]),
    ("uid-exponent", "uid = 1000", "uid = 1e3", ["image.uid = 1000.0"]),
    (
        "steps-string",
        "spec_num_steps = 2",
        'spec_num_steps = "2"',
        ["tracks.\"0.5.9\".presets.eagle3.spec_num_steps = '2'", "strict"],
    ),
    ("steps-bool", "spec_num_steps = 2", "spec_num_steps = true", ["presets.eagle3.spec_num_steps = True"]),
    ("cxx-string", "cxx_std = 17", 'cxx_std = "17"', ["cxx_std = '17'", "without quotes"]),
    (
        "fraction-string",
        "memory_fraction = 0.8",
        'memory_fraction = "0.8"',
        ["parallelism.memory_fraction = '0.8'", "strict"],
    ),
    ("fraction-bool", "memory_fraction = 0.8", "memory_fraction = true", ["parallelism.memory_fraction = True"]),
    ("threads-float", "nvcc_threads_max = 4", "nvcc_threads_max = 4.5", ["parallelism.nvcc_threads_max = 4.5"]),
    ("backward-string", "backward = false", 'backward = "false"', ["flash_attn.backward = 'false'", "true or false"]),
    ("draft-flag-int", "draft = true", "draft = 1", ["modes.eagle3.draft = 1"]),
    ("version-number", 'flashinfer = "0.6.3"', "flashinfer = 0.63", ["flashinfer = 0.63", "quoted string"]),
    # non-finite numbers
    ("fraction-nan", "memory_fraction = 0.8", "memory_fraction = nan", ["parallelism.memory_fraction = nan", "finite"]),
    (
        "memory-inf",
        "compile_job_memory_gib = 4.8",
        "compile_job_memory_gib = inf",
        ["compile_job_memory_gib = inf", "finite"],
    ),
    ("memory-minus-inf", "compile_job_memory_gib_backward = 6.2", "compile_job_memory_gib_backward = -inf", ["= -inf"]),
    # unknown keys and values: the allowed ones and the closest
    (
        "key-typo",
        'flashinfer = "0.6.3"',
        'flashinfr = "0.6.3"',
        ['unknown key tracks."0.5.9".flashinfr', "allowed: flashinfer", "perhaps you meant 'flashinfer'"],
    ),
    ("section-typo", "[parallelism]", "[paralelism]", ["unknown key paralelism", "perhaps you meant 'parallelism'"]),
    (
        "value-typo",
        'bases = "registry"',
        'bases = "registy"',
        ["profiles.release.bases = 'registy'", "perhaps you meant 'registry'"],
    ),
    (
        "kernel-install-typo",
        'install = { release = "pypi", offline = "pypi" }',
        'install = { release = "pypy", offline = "pypi" }',
        ["perhaps you meant 'pypi'"],
    ),
    (
        "default-profile-typo",
        '\nprofile = "offline"',
        '\nprofile = "ofline"',
        ["defaults.profile = 'ofline'", "perhaps you meant 'offline'"],
    ),
    (
        "published-profile-typo",
        'published_profile = "release"',
        'published_profile = "relase"',
        ["project.published_profile = 'relase'", "perhaps you meant 'release'"],
    ),
    (
        "default-track-typo",
        'sglang = "0.5.23"',
        'sglang = "0.5.24"',
        ["defaults.sglang = '0.5.24'", "perhaps you meant '0.5.23'"],
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_build_toml_mistakes_are_one_line_naming_the_key(tmp_path, old, new, expected):
    assert old in (ROOT / "build.toml").read_text(), old
    path = write_config(tmp_path, edit=lambda text: text.replace(old, new, 1))
    with pytest.raises(UsageError) as info:
        cfg.load(path)
    message = str(info.value)
    assert "\n" not in message
    for text in expected:
        assert text in message, (text, message)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--profile", "ofline"], "perhaps you meant 'offline'"),
        # a release one digit off the newest track (not a track itself): the newest is suggested
        (["--sglang", NEWEST + "9"], f"perhaps you meant '{NEWEST}'"),
    ],
    ids=["profile", "track"],
)
def test_plan_suggests_the_closest_profile_and_track(capsys, args, expected):
    rc, _, err = run_cli(capsys, "plan", *args)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert expected in err


def test_plan_refuses_a_bad_build_toml_with_exit_2(tmp_path):
    path = write_config(
        tmp_path, edit=lambda text: text.replace("spec_num_draft_tokens = 16", "spec_num_draft_tokens = 99")
    )
    proc = run_build_py("plan", "--config", str(path))
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert 'tracks."0.5.9".presets.eagle3.spec_num_draft_tokens = 99' in proc.stderr


def test_every_draft_mode_needs_each_tracks_draft_tree(tmp_path):
    def drop_presets(text: str) -> str:
        start = text.index('[tracks."0.5.23".presets.eagle3]')
        return text[:start] + text[text.index("[tracks.", start + 1) :]

    with pytest.raises(UsageError) as info:
        cfg.load(write_config(tmp_path, edit=drop_presets))
    message = str(info.value)
    assert "\n" not in message
    assert 'tracks."0.5.23".presets.eagle3 is missing' in message and "SGLang's own choice" in message


def test_the_image_cmd_mode_is_read_from_the_dockerfile():
    assert cfg.image_cmd_mode(ROOT) == "baseline"


CLI_CASES = [
    ("command", ["plna"], "perhaps you meant 'plan'"),
    ("patches-action", ["patches", "chek"], "perhaps you meant 'check'"),
    ("bench-metric", ["bench", "--endpoint", "x", "--label", "a", "--speedup-metric", "outptu"], "'output'"),
    ("bench-mode", ["bench", "--image", "x", "--modes", "eagle33", "--env", "MODEL_PATH=/m"], "'eagle3'"),
    ("max-jobs-digits", ["plan", "--max-jobs", "٣"], "--max-jobs: must be a positive integer"),
    ("memory-inf", ["plan", "--memory-gib", "inf"], "--memory-gib: must be a positive finite number"),
    ("memory-nan", ["plan", "--memory-gib", "nan"], "--memory-gib"),
    ("cpus-float", ["plan", "--cpus", "2.5"], "--cpus"),
]


@pytest.mark.parametrize(("args", "expected"), [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_cli_mistakes_name_the_closest_choice(capsys, args, expected):
    rc, _, err = run_cli(capsys, *args)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and expected in err


@pytest.mark.parametrize(
    "text",
    ["a = " + "[" * 100_000 + "]" * 100_000, "a = " + "{b=" * 3000 + "1" + "}" * 3000, "\xff\xfe"],
    ids=["arrays", "inline-tables", "not-utf8"],
)
def test_a_build_toml_no_one_could_mean_is_one_line(capsys, tmp_path, text):
    path = tmp_path / "build.toml"
    path.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    rc, _, err = run_cli(capsys, "plan", "--config", str(path))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err[-500:]
    assert str(path) in err
