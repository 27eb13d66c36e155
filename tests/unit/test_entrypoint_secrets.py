"""T0: no secret in any output of the entrypoint, by construction (issue 35 items 1 and 2).

Everything the entrypoint writes passes through one redaction step (errors.Redacted over stdout and stderr, fed by
errors.SECRETS from the first line of main): the key files' contents, the value after any option argparse would read
as --api-key or --admin-api-key, the value of a variable that holds a key in plain sight. A property-style test runs
every refusal path enumerated below (the issue's cases, and the inputs of the existing refusal tests) with generated
keys (random ones from the key alphabet, of several lengths; adversarial ones: a key that is a piece of a path the
output names, keys equal to words every output holds) and scans stdout, stderr and every file under the HOME, TMPDIR
and cache directories the run was given: the key is never there, nor (for a random key) any 16 characters of it.
"""

from __future__ import annotations

import io
import random
import string
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120.image.entrypoint import errors
from sm120.image.entrypoint.key_file import MASK
from tests.entrypoint_helpers import run_entrypoint, standin_run
from tests.unit.test_entrypoint_admin_key import with_admin_option

ALPHABET = string.ascii_letters + string.digits + "._~+/=-"
LENGTHS = (8, 13, 32, 64, 200, 4000)  # 4000: with its newline the file stays within key_file.MAX_BYTES
# Keys that are words every output holds, or the start of every command line.
ADVERSARIAL = ["baseline", "password", "entrypoint", "--model-path", "launch_server", "sglang.launch_server"]
WINDOW = 16  # no run of this many characters of a random key may show
BAD = "'\\"  # a quote and a backslash: outside the key alphabet


def random_key(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(length))


# --------------------------------------------------------------------------------------------------
# The refusal paths: (name, args, env) given the key and the path of a file that holds it
# --------------------------------------------------------------------------------------------------

Path_ = Callable[[str, str, Path], tuple[list[str], dict[str, str]]]
DRY = ["baseline", "--dry-run"]


def _after(*words: str) -> list[str]:
    return [*DRY, "--", *words]


PATHS: list[tuple[str, Path_, int | None]] = [
    # (name, (key, key file, tmp) -> (arguments, variables), the exit status a random key gets; None: not judged)
    # The issue's cases: a key where the entrypoint used to echo it
    ("ap-prefix", lambda k, f, t: (_after("--ap", k), {}), 2),
    ("ap-prefix-equals", lambda k, f, t: (_after(f"--ap={k}"), {}), 2),
    ("a-ambiguous", lambda k, f, t: (_after("--a", k), {}), 2),
    ("extra-args-unsplittable", lambda k, f, t: (DRY, {"EXTRA_ARGS": f"--api-key '{k}"}), 2),
    ("extra-args-unsplittable-other", lambda k, f, t: (DRY, {"EXTRA_ARGS": f'--chat-template "{k}'}), 2),
    ("key-as-key-file", lambda k, f, t: (DRY, {"API_KEY_FILE": k}), 2),
    ("key-as-admin-key-file", lambda k, f, t: (DRY, {"ADMIN_API_KEY_FILE": k}), 2),
    # Key options on command lines
    ("api-key-after-dashes", lambda k, f, t: (_after("--api-key", k), {}), 2),
    ("api-key-equals", lambda k, f, t: (_after(f"--api-key={k}"), {}), 2),
    ("admin-api-key", lambda k, f, t: (_after("--admin-api-key", k), {}), 2),
    ("admin-prefix", lambda k, f, t: (_after("--adm", k), {}), 2),
    ("extra-args-api-key", lambda k, f, t: (DRY, {"EXTRA_ARGS": f"--mem-fraction-static 0.8 --api-key {k}"}), 2),
    ("extra-args-ap-equals", lambda k, f, t: (DRY, {"EXTRA_ARGS": f"--ap={k}"}), 2),
    ("both-with-file", lambda k, f, t: (_after("--api-key", k), {"API_KEY_FILE": f}), 2),
    # Keys in variables, typos holding keys
    ("api-key-variable", lambda k, f, t: (DRY, {"API_KEY": k}), 2),
    ("sglang-api-key-variable", lambda k, f, t: (DRY, {"SGLANG_API_KEY": k}), 2),
    ("admin-api-key-variable", lambda k, f, t: (DRY, {"ADMIN_API_KEY": k}), 2),
    ("typo-of-the-file-variable", lambda k, f, t: (DRY, {"API_KEY_FIEL": k}), 2),
    ("typo-tp", lambda k, f, t: (DRY, {"TP_SZIE": k}), 2),
    # The existing refusals, the key known from its file, the value of the mistake being the key itself
    ("key-as-tp-size", lambda k, f, t: (DRY, {"API_KEY_FILE": f, "TP_SIZE": k}), 2),
    ("key-as-port", lambda k, f, t: (DRY, {"API_KEY_FILE": f, "PORT": k}), 2),
    ("key-as-host", lambda k, f, t: (DRY, {"API_KEY_FILE": f, "HOST": k + ":x"}), 2),
    ("key-as-mode", lambda k, f, t: ([k, "--dry-run"], {"API_KEY_FILE": f}), 2),
    ("key-in-model-path", lambda k, f, t: (DRY, {"API_KEY_FILE": f, "MODEL_PATH": f"/nonexistent/{k}"}), 2),
    ("key-as-extra-value", lambda k, f, t: (DRY, {"API_KEY_FILE": f, "EXTRA_ARGS": f"--chat-template {k}"}), 2),
    ("key-as-stray-word", lambda k, f, t: ([*DRY, "--", k], {"API_KEY_FILE": f}), 2),
    ("key-after-abbreviation", lambda k, f, t: (_after("--mem-frac", k), {"API_KEY_FILE": f}), 2),
    ("key-as-skip-rule", lambda k, f, t: (DRY, {"API_KEY_FILE": f, "SKIP_RUNTIME_RULES": k}), 2),
    ("key-as-gpu-twice", lambda k, f, t: (DRY, {"API_KEY_FILE": f, "CUDA_VISIBLE_DEVICES": f"{k},{k}"}), 2),
    ("key-as-dist-init", lambda k, f, t: (DRY, {"API_KEY_FILE": f, "NNODES": "2", "DIST_INIT_ADDR": k}), 2),
    ("key-as-plan", lambda k, f, t: (DRY, {"API_KEY_FILE": f, "SM120_PLAN": f"/nonexistent/{k}"}), 2),
    (
        "key-in-eagle3-without-draft",
        lambda k, f, t: (["eagle3", "--dry-run"], {"API_KEY_FILE": f, "DRAFT_MODEL_PATH": ""}),
        2,
    ),
    ("tokenizer-workers", lambda k, f, t: (_after("--tokenizer-worker-num", "2"), {"API_KEY_FILE": f}), 2),
    ("grpc-port", lambda k, f, t: (_after("--grpc-port", "5000"), {"API_KEY_FILE": f}), 2),
    ("grpc-mode", lambda k, f, t: (_after("--grpc-mode"), {"API_KEY_FILE": f}), 2),
    ("key-file-two-lines", lambda k, f, t: (DRY, {"API_KEY_FILE": _write(t / "two", f"{k}\n{k}\n")}), 2),
    # A bad key file: the secret is its line as it is (the key with the character the alphabet refuses)
    ("key-file-bad-character", lambda k, f, t: (DRY, {"API_KEY_FILE": _write(t / "bad", k + BAD)}), 2),
    ("admin-key-file-bad-character", lambda k, f, t: (DRY, {"ADMIN_API_KEY_FILE": _write(t / "bad", k + BAD)}), 2),
    # What succeeds: the key in the command, masked; a start through the launcher (the stand-in logs its argv)
    ("dry-run", lambda k, f, t: (DRY, {"API_KEY_FILE": f}), 0),
    ("dry-run-admin", lambda k, f, t: (DRY, {"API_KEY_FILE": f, "ADMIN_API_KEY_FILE": f}), 0),
    ("help", lambda k, f, t: (["--help"], {"API_KEY_FILE": f}), 0),
    ("start", lambda k, f, t: (["baseline"], {"API_KEY_FILE": f, "FAKE_SGLANG_LOG_ARGS": "1"}), 0),
    ("start-admin", lambda k, f, t: (["baseline"], {"ADMIN_API_KEY_FILE": f, "FAKE_SGLANG_LOG_ARGS": "1"}), 0),
]


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def keys_for(index: int, tmp_path: Path) -> list[tuple[str, bool]]:
    """Three keys per path: two random (lengths taken in turn), one adversarial (in turn; one of them a piece of
    every path the run names: its temporary directory's name). (key, random?)"""
    rng = random.Random(index)
    adversarial = [*ADVERSARIAL, tmp_path.name][index % (len(ADVERSARIAL) + 1)]
    lengths = LENGTHS[index % len(LENGTHS)], LENGTHS[(index + 3) % len(LENGTHS)]
    return [(random_key(rng, n), True) for n in lengths] + [(adversarial, False)]


def written(dirs: list[Path]) -> dict[str, str]:
    """Every file under dirs: its path below the directory and its content (bytes read as Latin-1)."""
    found = {}
    for top in dirs:
        for path in top.rglob("*"):
            if path.is_file():
                found[str(path.relative_to(top))] = path.read_bytes().decode("latin-1")
    return found


def assert_never_shown(key: str, is_random: bool, proc: subprocess.CompletedProcess[str], files: dict[str, str]):
    texts = {"stdout": proc.stdout, "stderr": proc.stderr, **{f"file {n}": n + "\n" + c for n, c in files.items()}}
    for where, text in texts.items():
        assert key not in text, f"the key is in {where}: {text[-1500:]}"
        if is_random and len(key) >= 2 * WINDOW:
            pieces = [key[i : i + WINDOW] for i in range(len(key) - WINDOW + 1)]
            shown = next((p for p in pieces if p in text), None)
            assert shown is None, f"{WINDOW} characters of the key are in {where}: {text[-1500:]}"


@pytest.mark.parametrize(("index", "path"), list(enumerate(PATHS)), ids=[p[0] for p in PATHS])
def test_the_key_is_never_in_any_output_or_file(tmp_path, index, path):
    name, make, status = path
    setup = standin_run(tmp_path / "run", TP_SIZE="8")
    with_admin_option(setup["site"])
    scanned = [tmp_path / "home", tmp_path / "tmpdir", tmp_path / "run" / "cache"]
    for directory in scanned[:2]:
        directory.mkdir()
    (tmp_path / "record").mkdir()
    for key, is_random in keys_for(index, tmp_path):
        key_file = tmp_path / "secret" / "api_key"
        key_file.parent.mkdir(exist_ok=True)
        key_file.write_text(key + "\n")
        args, env = make(key, str(key_file), tmp_path / "secret")
        run_env = {
            **setup["env"],
            "HOME": str(scanned[0]),
            "TMPDIR": str(scanned[1]),
            "XDG_CACHE_HOME": str(scanned[2]),
            "FAKE_SGLANG_RECORD": str(tmp_path / "record" / "server.json"),  # the server's own: it holds its argv
            **env,
        }
        proc = run_entrypoint(args, run_env)
        secret = key + BAD if name.endswith("bad-character") else key  # what the file holds is the secret
        if is_random and status is not None:
            assert proc.returncode == status, (name, proc.stdout[-500:], proc.stderr[-1500:])
        assert "Traceback" not in proc.stderr, proc.stderr
        assert_never_shown(secret, is_random, proc, written(scanned))


def test_the_paths_cover_every_refusal_the_issue_names():
    names = {p[0] for p in PATHS}
    assert {"ap-prefix", "extra-args-unsplittable", "key-as-key-file", "grpc-mode", "admin-api-key"} <= names


# --------------------------------------------------------------------------------------------------
# The redaction step itself
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def secrets():
    errors.SECRETS.clear()
    yield errors.SECRETS
    errors.SECRETS.clear()


def test_overlapping_secrets_leave_no_piece_of_either(secrets):
    secrets.add("abcdefgh12")
    secrets.add("12345678")
    assert secrets.redact("x abcdefgh12345678 y") == f"x {MASK} y"
    assert secrets.redact("abcdefgh12abcdefgh12") == MASK


def test_quoted_forms_are_masked_too(secrets):
    secrets.add("it's-a\\key")  # a value from a command line: any character
    assert secrets.redact(repr("it's-a\\key")) == f'"{MASK}"'
    assert secrets.redact('{"k": "it\'s-a\\\\key"}') == f'{{"k": "{MASK}"}}'


def test_a_short_value_is_not_a_secret(secrets):
    secrets.add("abc")
    assert secrets.redact("abc abc") == "abc abc"


def test_a_secret_split_over_two_writes_is_masked(secrets):
    secrets.add("Sekrit-0123456789")
    out = io.StringIO()
    stream = errors.Redacted(out)
    stream.write("first Sekrit-012")
    stream.write("3456789 second\nthird Sek")
    stream.write("rit-0123456789")
    stream.flush()
    assert out.getvalue() == f"first {MASK} second\nthird {MASK}"


def test_show_masks_before_it_cuts(secrets):
    key = "k" * 300
    secrets.add(key)
    assert errors.show(key) == repr(MASK) and errors.show("x" + key) == repr("x" + MASK)
    assert "k" * 16 not in errors.clip("x" + key, 50)
