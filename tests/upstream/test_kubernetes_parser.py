"""T1: the pods of the Kubernetes manifests (`build.py deploy kubernetes`) against the real SGLang of every track.

For each track and mode, 3 nodes x 8 GPUs: the leader's and the last worker's environment, as LWS and the kubelet
make it (tests/kubernetes_pods.py), is given to the entrypoint's --dry-run in that release's CPU-only venv, with
the release patched as the image ships it; the entrypoint checks the command with SGLang's own parser, and the
printed commands are parsed once more here, independently, for the multi-node options.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from sm120.plan import config as cfg
from sm120.plan import resolve as planmod
from sm120.verify import startup
from tests.entrypoint_helpers import real_plan, run_entrypoint
from tests.kubernetes_pods import (
    MODELS,
    container,
    entrypoint_env,
    leader_address,
    models_volume,
    one,
    render,
    template,
)
from tests.upstream.conftest import TRACKS
from tests.upstream.parsing import TIMEOUT_S, parse_commands

NODES, GPUS, NAMESPACE = 3, 8, "serving"

OPTIONS = ["--nnodes", "--node-rank", "--dist-init-addr", "--tp-size", "--port", "--model-path"]


@pytest.mark.parametrize("sglang_python", TRACKS, indirect=True)
def test_every_pods_command_passes_sglangs_parser(sglang_python, patched_tree, run_snippet, tmp_path, request):
    version = request.node.callspec.params["sglang_python"]
    plan = planmod.resolve(cfg.load(), sglang=version)
    site = patched_tree(version)
    volume = models_volume(tmp_path / "models-volume")
    (tmp_path / "cache").mkdir()
    image = {
        "SM120_PLAN": str(real_plan(tmp_path / "plan.json", version)),
        "PYTHONPATH": str(site),
        "SM120_CACHE_DIR": str(tmp_path / "cache"),
    }
    commands: list[tuple[str, int, str, list[str]]] = []
    for mode, spec in sorted(plan.entrypoint.modes.items()):
        draft = ["--draft-model-path", MODELS["DRAFT_MODEL_PATH"]] if spec.draft else []
        docs = render(
            tmp_path / f"k8s-{mode}",
            *["--sglang", version, "--nodes", str(NODES), "--gpus", str(GPUS), "--mode", mode],
            *["--model-path", MODELS["MODEL_PATH"], *draft, "--namespace", NAMESPACE],
        )
        lws = one(docs, "LeaderWorkerSet")
        for index in (0, NODES - 1):
            args = container(template(lws, index))["args"]
            proc = run_entrypoint(
                [*args, "--dry-run"],
                entrypoint_env(docs, index, volume, **image),
                python=sglang_python,
                timeout=TIMEOUT_S,
            )
            assert proc.returncode == 0, (mode, index, proc.stderr)
            assert f"# the command is accepted by SGLang {version}'s own parser" in proc.stdout, proc.stdout
            _, argv = startup.split_command(shlex.split(proc.stdout.strip().splitlines()[-1]))
            commands.append((mode, index, leader_address(lws, 0, NAMESPACE), argv))

    parsed = parse_commands(run_snippet, sglang_python, [c[3] for c in commands], OPTIONS, pythonpath=[site])
    assert len(parsed) == len(commands) == 2 * len(plan.entrypoint.modes)
    for (mode, index, leader, _), got in zip(commands, parsed, strict=True):
        assert got["version"] == version
        assert got["--nnodes"] == NODES and got["--node-rank"] == index, (mode, index, got)
        # LWS's leader address is a DNS name (<lws>-<group>.<lws>.<namespace>), not an IP address.
        host, _, port = got["--dist-init-addr"].rpartition(":")
        assert host == leader and port.isdigit(), got
        assert got["--tp-size"] == NODES * GPUS and got["--port"] == plan.image.port
        assert got["--model-path"] == str(volume / Path(MODELS["MODEL_PATH"]).name)
