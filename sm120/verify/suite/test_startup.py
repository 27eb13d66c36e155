"""T2.5 start-up: SGLang's own start-up path in the image, as the image's user, without a GPU, on an sm_120 persona.

Inside a container of the image, sm120/verify/startup_probe.py makes torch.cuda answer as the cards of
sm120/verify/personas.toml (an RTX PRO 6000 Blackwell, capability 12.0; eight of them for TP 8), links the CUDA
driver stub as libcuda.so.1 and puts a stand-in nvidia-smi on PATH, then runs SGLang's real code:

- the model registry (every model module imported with the CUDA paths taken): the supported architectures and
  every EAGLE-3 drafter class the entrypoint accepts are registered; a class dropped by an import error names it;
- the start-up modules (scheduler, model runner, EAGLE worker, attention and MoE layers) import: a kernel library
  imported at module level that does not load names the SGLang module and line that imports it;
- for Kimi-K2.5 NVFP4 and DeepSeek-V3 (config.json written here, no weights), baseline and eagle3: the command
  the image's entrypoint prints (`--dry-run`, TP 8, the sm_120 runtime rules) goes through SGLang's own
  `prepare_server_args` (ServerArgs and its post-init), the server's launch checks (`_set_envs_and_config`,
  `check_server_args`: the cuDNN gate, never disabled), the scheduler's MoE/GEMM runner set-up and the model
  loader's quantization step (`_get_quantization_config`: JSON and the device's capability, no weights); what
  SGLang decided is the decision table of the report, and a decision that lands on an sm_120 trap
  (build.toml [[sm120_traps]]) fails, naming the option to set.

One probe process per launch environment does all of it, as the image's user, in the `box` container; only the
cases and the registry that the selected checks need are run (`-k`). SM120_PERSONA=rtx-5090 picks the other card.

Nothing here launches a kernel or allocates device memory: such a call stops the probe and is named with the
SGLang line that made it.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from sm120.plan.config import Sm120Trap
from sm120.verify import docker_env, persona, startup
from sm120.verify.suite.conftest import REPORT, entrypoint, last_json, plan_of_image

WORK = "/tmp/sm120-startup"
MODELS = f"{WORK}/models"
PROBE = Path(startup.__file__).with_name("startup_probe.py")
DEVICES = 8  # TP 8: the reference run's eight cards
REFUSED: dict[str, str] = {}  # case -> the entrypoint's error, where it refuses the case's drafter


def _cases() -> list[str]:
    """The cases of the image's own modes (its plan.json), so every track's image is judged by what it serves."""
    plan = plan_of_image()
    return startup.cases({name: mode.draft for name, mode in plan.entrypoint.modes.items()}) if plan else []


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", _cases())
    if "drafter_case" in metafunc.fixturenames:
        metafunc.parametrize("drafter_case", [c for c in _cases() if startup.family(c).drafter != "llama"])


@pytest.fixture(scope="module")
def card() -> persona.Persona:
    chosen = persona.load().get(os.environ.get("SM120_PERSONA") or None)  # personas.toml: default rtx-pro-6000
    major, minor = chosen.capability.value
    REPORT.startup["persona"] = f"{chosen.name.value} x{DEVICES} (capability {major}.{minor})"
    return chosen


@pytest.fixture(scope="module")
def staged(box, image_uid) -> str:
    """The probe and the model directories, copied into the container (owned by the image's user)."""
    files: dict[str, bytes | str] = {"startup_probe.py": PROBE.read_bytes(), **startup.model_files("models")}
    docker_env.copy_in(box, {f"sm120-startup/{k}": v for k, v in files.items()}, "/tmp", uid=image_uid)
    return WORK


@pytest.fixture(scope="module")
def probe(box, image, host, image_uid, staged, card, plan) -> Callable[..., dict[str, Any]]:
    """probe(name, **job): run the probe as the image's user with a job file; returns what it reported."""

    def _probe(name: str, **job: Any) -> dict[str, Any]:
        body = {
            "persona": card.answers(DEVICES),
            "workdir": f"{WORK}/{name}",
            "entrypoint_root": str(PurePosixPath(image.entrypoint[-1]).parent),  # the image's entrypoint package
            # what the image leaves out (its plan's not_shipped): the probe audits opens and imports of it
            "not_shipped": [glob for entry in plan.not_shipped for glob in entry.paths],
            "site_packages": f"/opt/venv/lib/python{plan.python_version}/site-packages",
            **job,
        }
        docker_env.copy_in(box, {f"sm120-startup/{name}.json": json.dumps(body)}, "/tmp", uid=image_uid)
        started = time.monotonic()
        result = host.run(f"{shlex.quote(image.python)} {WORK}/startup_probe.py {WORK}/{name}.json")
        found = last_json(result.stdout)
        if found is None:
            tail = " | ".join([ln for ln in result.stderr.strip().splitlines() if ln.strip()][-4:])
            pytest.fail(f"the start-up probe reported nothing, exit {result.rc}: {tail}", pytrace=False)
        found["seconds"] = round(time.monotonic() - started, 1)
        return found

    return _probe


def _dry_run(box, image, plan, mode: str, family: startup.Family) -> tuple[dict[str, str], list[str]] | str:
    """The command the entrypoint prints, or its error when it refuses the case (exit 2: a drafter class this
    image's SGLang does not have; test_a_drafter_the_image_lacks_is_refused_naming_its_tracks judges that)."""
    env = {"TP_SIZE": str(DEVICES), "MODEL_PATH": f"{MODELS}/{family.key}/target"}
    if plan.entrypoint.modes[mode].draft:
        env["DRAFT_MODEL_PATH"] = f"{MODELS}/{family.key}/draft"
    rc, stdout, stderr = entrypoint(box, image, [mode, "--dry-run"], env)
    if rc == 2 and "has no drafter class" in stderr:
        return " ".join(stderr.split())
    if rc != 0:
        pytest.fail(f"{family.key}: `{mode} --dry-run` exited {rc}: {stderr.strip()[-400:]}", False)
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    return startup.split_command(shlex.split(lines[-1]))


def _selected(request: pytest.FixtureRequest) -> tuple[set[str], bool]:
    """(the cases, whether the registry) that the selected checks of this module need (`-k` keeps runs short)."""
    items = [i for i in request.session.items if i.module is request.module]
    params = [i.callspec.params for i in items if hasattr(i, "callspec")]
    cases = {p[key] for p in params for key in ("case", "drafter_case") if key in p}
    return cases, any("registry" in i.fixturenames for i in items)


@pytest.fixture(scope="module")
def commands(request, box, image, plan, staged) -> dict[str, tuple[dict[str, str], list[str]]]:
    """case -> (env, SGLang arguments) of the command the image's entrypoint prints (`--dry-run`, TP 8), for
    the selected cases, at once (each runs SGLang's parser in the image: seconds of CPU)."""
    wanted, _ = _selected(request)
    jobs = {case: (case.split("/", 1)[1], startup.family(case)) for case in _cases() if case in wanted}
    if not jobs:
        return {}
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {case: pool.submit(_dry_run, box, image, plan, mode, family) for case, (mode, family) in jobs.items()}
        results = {case: future.result() for case, future in futures.items()}
    found = {case: r for case, r in results.items() if not isinstance(r, str)}
    REFUSED.update({case: r for case, r in results.items() if isinstance(r, str)})
    REPORT.startup["refused_by_entrypoint"] = dict(REFUSED)
    REPORT.startup["commands"] = {
        case: shlex.join([*(f"{k}={v}" for k, v in env.items()), *argv]) for case, (env, argv) in found.items()
    }
    return found


@pytest.fixture(scope="module")
def run(request, probe, commands) -> dict[str, Any]:
    """One probe per distinct environment of the commands (one for both tracks' rules today): the first also
    imports the registry and the start-up modules, in the same process, as the server would."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for case, (env, argv) in commands.items():
        groups.setdefault(json.dumps(env, sort_keys=True), []).append({"id": case, "env": env, "argv": argv})
    _, with_registry = _selected(request)
    if not groups:
        groups["{}"] = []
    merged: dict[str, Any] = {"registry": None, "cases": {}, "seconds": 0.0, "boundaries_all": [], "audit": []}
    for i, cases in enumerate(groups.values()):
        tasks = (["registry"] if i == 0 and with_registry else []) + (["server_args"] if cases else [])
        env = cases[0]["env"] if cases else {}
        found = probe(f"run-{i}", env=env, tasks=tasks, modules=list(startup.START_UP_MODULES), cases=cases)
        merged["seconds"] += found["seconds"]
        merged["boundaries_all"] += found.get("boundaries_all", [])
        merged["audit"] += found.get("audit", [])
        if "error" in found:
            merged.setdefault("error", found["error"])
        for key in ("asked", "nvidia_smi"):
            merged.setdefault(key, found.get(key))
        if i == 0:
            merged["registry"] = found.get("registry") or {}
        args = found.get("server_args") or {}
        for key in ("torch", "cudnn", "platform"):
            if key in args:
                merged.setdefault(key, args[key])
        for case_id, rec in args.get("cases", {}).items():
            rec["deep_gemm"] = args.get("deep_gemm", {})
            merged["cases"][case_id] = rec
    reg = merged["registry"] or {}
    REPORT.startup.update(
        platform=reg.get("platform", {}),
        kernels=reg.get("kernels", {}),
        cudnn=merged.get("cudnn"),
        decisions={cid: startup.decisions(rec) for cid, rec in merged["cases"].items() if "settings" in rec},
        refused={cid: why for cid, rec in merged["cases"].items() if (why := startup.refusal(rec))},
        seconds=round(merged["seconds"], 1),
        asked=merged.get("asked") or {},
        nvidia_smi=merged.get("nvidia_smi") or [],
    )
    return merged


@pytest.fixture(scope="module")
def registry(run) -> dict[str, Any]:
    if "error" in run and not run["registry"]:
        pytest.fail(f"the start-up probe stopped: {startup.describe_failure(run['error'])}", pytrace=False)
    return {**run["registry"], "asked": run.get("asked") or {}, "boundaries_all": run["boundaries_all"]}


def _skip_refused(case: str) -> None:
    if case in REFUSED:
        pytest.skip(f"{case}: the entrypoint refuses its drafter on this track (judged by the drafter check)")


def test_torch_answers_as_the_sm120_persona(registry, card):
    """SGLang sees a CUDA device of capability 12.0 (is_cuda() true), and no GPU call was reached on the way."""
    assert "error" not in registry, f"the registry import stopped: {startup.describe_failure(registry['error'])}"
    platform = registry["platform"]
    assert platform.get("is_cuda") is True, f"SGLang's is_cuda() under the persona: {platform}"
    if "is_sm120_supported" in platform:
        assert platform["is_sm120_supported"] is True, platform
    assert platform.get("is_sm100_supported") in (None, False), platform
    assert registry["asked"].get("get_device_capability"), f"SGLang never asked the capability: {registry['asked']}"
    reached = [f"{b['call']} from {b['sglang_frame']}" for b in registry.get("boundaries_all", [])]
    assert not reached, f"the import path reached calls that need a GPU: {reached}"


def test_the_registry_registers_every_supported_architecture(registry):
    archs = set(registry.get("archs") or [])
    assert archs, f"the model registry is empty: {registry.get('error')}"
    missing = [arch for arch in [*startup.SUPPORTED, *registry.get("eagle3_in_source", [])] if arch not in archs]
    why = []
    for arch in missing:
        module = next((m for m, names in registry.get("entry_classes", {}).items() if arch in names), None)
        failure = registry.get("dropped", {}).get(module) if module else None
        why.append(f"{arch}: " + (startup.describe_failure(failure) if failure else "not in any model module"))
    if missing:
        pytest.fail("SGLang's model registry dropped " + "; ".join(why), pytrace=False)
    assert any(startup.EAGLE3_MARK in a for a in registry.get("eagle3_in_source", [])), "no EAGLE-3 drafter class"


def test_kernel_libraries_imported_at_module_level_load(registry):
    """Each SGLang module that fails to import under the persona because of a kernel library is named."""
    failures = {**registry.get("dropped", {}), **{m: f for m, f in registry.get("modules", {}).items() if f}}
    broken = {m: f for m, f in failures.items() if isinstance(f, dict) and startup.kernel_library(f)}
    causes: dict[str, list[str]] = {}  # one line per cause: the library, the importing module and line
    for module, failure in sorted(broken.items()):
        cause = f"{startup.kernel_library(failure)} (imported by {startup.describe_failure(failure)})"
        causes.setdefault(cause, []).append(module.rsplit(".", 1)[-1])
    if causes:
        lines = [f"{cause}: {len(mods)} module(s) fail, {', '.join(mods[:8])}" for cause, mods in causes.items()]
        pytest.fail("kernel libraries that SGLang imports on CUDA do not load: " + " | ".join(lines), pytrace=False)
    others = {m: f for m, f in failures.items() if f and m not in broken and isinstance(f, dict) and "type" in f}
    for module, failure in others.items():
        REPORT.warnings.append(f"start-up: {module} does not import: {startup.describe_failure(failure)}")


def test_sglang_accepts_the_entrypoints_command(case: str, run):
    """SGLang's own ServerArgs and post-init checks, the server's launch checks (the cuDNN gate included), the
    scheduler's runner set-up and the model loader's quantization step: every refusal is named."""
    assert "error" not in run, f"the probe stopped: {startup.describe_failure(run['error'])}"
    _skip_refused(case)
    rec = run["cases"].get(case)
    assert rec is not None, f"{case} was not run"
    runners = rec.get("runners", {})
    problems = []
    if "error" in rec:
        problems.append(f"SGLang refused to start: {startup.describe_failure(rec['error'])}")
    if rec.get("boundaries"):
        problems.append(f"start-up reached calls that need a GPU: {rec['boundaries']}")
    if "load_error" in runners:
        why = startup.describe_failure(runners["load_error"])
        problems.append(f"SGLang's model loader refuses the checkpoint's quantization: {why}")
    if problems:
        pytest.fail(f"{case}: " + " || ".join(problems), pytrace=False)
    if "error" in runners:  # the scheduler's set-up differs between releases: what it could not tell is `?`
        why = startup.describe_failure(runners["error"])
        REPORT.warnings.append(f"start-up {case}: the scheduler's runner set-up: {why}")


def test_no_decision_lands_on_an_sm120_trap(case: str, run, expect, plan):
    _skip_refused(case)
    rec = run["cases"].get(case) or {}
    if "settings" not in rec:
        pytest.skip(f"{case}: SGLang made no decisions (see test_sglang_accepts_the_entrypoints_command)")
    traps = [Sm120Trap.model_validate(t) for t in plan.sm120_traps]  # build.toml's, carried in its plan.json
    hits = startup.trap_hits(traps, expect.sglang, {case: startup.decisions(rec)})
    assert not hits, " | ".join(hit.message(expect.sglang) for hit in hits)


def test_every_trap_is_checked_against_a_decision(case: str, run, expect, plan):
    """A trap is only as good as the decision it reads: each one that holds for this release and quantization must
    find at least one of its settings among what SGLang decided (a release that renames or nests a setting would
    otherwise pass the trap check by reading nothing)."""
    _skip_refused(case)
    rec = run["cases"].get(case) or {}
    if "settings" not in rec:
        pytest.skip(f"{case}: SGLang made no decisions (see test_sglang_accepts_the_entrypoints_command)")
    decided = startup.decisions(rec)
    blind = [
        trap
        for trap in map(Sm120Trap.model_validate, plan.sm120_traps)
        if trap.applies(expect.sglang, decided.get("quantization"), decided.get("draft_attention"))
        and not set(trap.settings) & set(decided)
    ]
    assert not blind, "; ".join(
        f"SGLang {expect.sglang} decided none of {', '.join(t.settings)}: the trap '{t.reason[:60]}...' reads nothing"
        for t in blind
    )


def test_a_drafter_the_image_lacks_is_refused_naming_its_tracks(drafter_case: str, run, registry):
    """A drafter class only some tracks' SGLang has (the MLA drafter): where SGLang's own registry in this image has
    it, the entrypoint accepts it and SGLang starts the case (the checks above); where the registry lacks it, the
    entrypoint refuses it in one line naming the tracks and images that have it."""
    case = drafter_case
    drafter = startup.family(case).draft_class
    in_registry = drafter in set(registry.get("archs") or [])
    if case not in REFUSED:
        assert in_registry, f"{case}: the entrypoint accepted {drafter}, which SGLang's registry here lacks"
        assert case in run["cases"], f"{case}: accepted but not run"
        return
    assert not in_registry, f"{case}: the entrypoint refused {drafter}, which SGLang's registry has: {REFUSED[case]}"
    assert "use the image of track" in REFUSED[case], f"{case}: the refusal names no track: {REFUSED[case]}"


def test_start_up_touches_nothing_the_image_leaves_out(run, registry, plan):
    """SGLang's start-up on the persona (the registry, the start-up modules, every case) opens, imports and loads
    none of the files the image does not ship (its plan's not_shipped, with their reasons), and connects to no
    address off this machine (nothing is fetched, e.g. FlashInfer's cubins). An audit hook watches the probe."""
    if not plan.not_shipped:
        pytest.skip("the image's plan leaves nothing out: only the network is audited")
    events = run.get("audit") or []
    assert not events, "start-up touched what the image leaves out or the network: " + "; ".join(
        f"{e['event']} {e['what']}" for e in events[:8]
    )
