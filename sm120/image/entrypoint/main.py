"""The order of the checks (cheap ones first: a mistake costs seconds), then the exec of SGLang."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import stat
import sys
import traceback
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from . import (
    api_key,
    assemble,
    environment,
    errors,
    helptext,
    models,
    options,
    parser_check,
    prebuilt,
    preflight,
    presets,
    rules,
    sglang_source,
    tools,
)
from .errors import ImageError, Log, UsageError, show, suggest
from .spec import EntrypointSpec, ModeSpec

# What an EAGLE-3 target must have (speculative/eagle_worker.py, model_executor/model_runner.py).
EAGLE3_TARGET_HOOKS = ("get_embed_and_head", "set_eagle3_layers_to_capture")
# For telling a mode from a program when the image's plan is unreadable (the first: the default); otherwise the modes
# and the default mode are the plan's (build.toml [modes] and [defaults] mode).
FALLBACK_MODES = ("baseline", "eagle3")


@dataclass
class Invocation:
    """The entrypoint's own arguments: a mode, --dry-run, --help, and SGLang's options after `--`; or a program, a
    tool mode (tools.TOOLS) or one on PATH, to run instead of SGLang with the arguments after its word as they are."""

    mode: str
    dry_run: bool = False
    help: bool = False
    sglang_args: list[str] = field(default_factory=list)
    program: list[str] | None = None


def parse(argv: list[str], spec: EntrypointSpec | None, environ: Mapping[str, str]) -> Invocation:
    modes: Collection[str] = spec.modes if spec else FALLBACK_MODES
    request = Invocation(spec.default_mode if spec else FALLBACK_MODES[0])
    if argv and (argv[0] in tools.TOOLS or (not argv[0].startswith("-") and argv[0] not in modes)):
        if argv[0] in tools.TOOLS or shutil.which(argv[0], path=environ.get("PATH")):
            request.program = list(argv)
            return request
        raise UsageError(
            f"unknown mode {show(argv[0])}{suggest(argv[0], [*modes, *tools.TOOLS])}",
            f"modes: {', '.join(sorted(modes))}; or a program on PATH (e.g. bash); see --help",
        )

    ours, request.sglang_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    mode_given = False
    for token in ours:
        if token == "--dry-run":
            request.dry_run = True
        elif token in ("--help", "-h"):
            request.help = True
        elif token.startswith("-"):
            raise UsageError(
                f"unknown entrypoint option {show(token)} (options: --dry-run, --help)"
                f"{suggest(token, ('--dry-run', '--help'))}",
                f"SGLang options go after --, e.g. `{request.mode} -- {token} ...`",
            )
        elif not mode_given and token in modes:
            request.mode, mode_given = token, True
        elif token in modes:
            raise UsageError(f"two modes given ({request.mode}, {token}): pick one of {', '.join(sorted(modes))}")
        else:
            raise UsageError(
                f"unexpected argument {show(token)}",
                f"usage: [{'|'.join(sorted(modes))}] [--dry-run] [--help] [-- SGLANG-OPTIONS]",
            )
    return request


def _sglang(cmd_argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "sglang.launch_server", *cmd_argv]


def quote(word: str) -> str:
    """shlex.quote, except that a word with control characters (a newline in a path) is written $'...' (bash's
    ANSI-C quoting), so the command stays on one line."""
    if not re.search(r"[\x00-\x1f\x7f]", word):
        return shlex.quote(word)
    escaped = word.replace("\\", "\\\\").replace("'", "\\'")
    return f"$'{errors.one_line(escaped)}'"  # one_line writes the control characters as bash reads them: \n, \x01


def _draft_tree(cmd: options.Command, mode: ModeSpec, mode_name: str) -> str:
    """Which EAGLE-3 draft tree the command runs, and why (the --dry-run comment)."""
    chosen = [item for option in assemble.TREE_OPTIONS if (item := cmd.last(option)) is not None]
    if chosen and not all(item.source == f"preset {mode_name}" for item in chosen):
        values = ", ".join(f"{item.option.removeprefix('--speculative-')} {item.value}" for item in chosen)
        return f"{values} (set by {', '.join(sorted({item.source for item in chosen}))})"
    return " ".join(mode.describe_draft_tree().split())


def _shell_line(argv: list[str], env: Mapping[str, str]) -> str:
    return " ".join([*(f"{k}={quote(v)}" for k, v in env.items()), *(quote(a) for a in argv)])


def _check_models(
    effective: assemble.Effective,
    installed: sglang_source.InstalledSGLang | None,
    spec: EntrypointSpec,
    log: Log,
    attn_tp: int,
    user_quantization: bool,
) -> models.Model:
    target = models.open_model(effective.model)
    log.note(f"target model: {models.describe(target)}")
    models.check_heads(target, attn_tp, "target")
    version = (installed.version if installed else None) or ""
    # A quant_method the installed SGLang does not know stops it in ModelConfig, minutes into the start.
    known = installed.quantization_methods() if installed and not user_quantization else frozenset()
    method = models.raw_quant_method(target)
    if method is not None and known and not {method, models.quantization(target)} & known:
        raise UsageError(
            f"{target.label}: config.json's quant_method {method!r} is no quantization "
            f"{f'SGLang {version}' if version else 'the installed SGLang'} knows (it would stop at start)",
            f"known: {', '.join(sorted(known)[:10])}, ...: use a checkpoint in one of them",
        )
    if effective.speculative != "EAGLE3" or effective.draft is None:
        return target
    draft = models.open_model(effective.draft)
    arch = models.check_drafter(draft)
    models.check_heads(draft, attn_tp, "drafter")
    log.note(f"EAGLE-3 drafter: {models.describe(draft)}")
    for warning in models.check_pair(target, draft):
        log.warn(warning)
    if installed is None:
        return target
    version = version or "here"
    if arch is not None and not installed.registered(arch):
        known_drafters = ", ".join(installed.registered_like(models.EAGLE3_MARK)) or "none"
        elsewhere = spec.drafters.get(arch)
        if elsewhere is not None and elsewhere.tracks:
            raise UsageError(
                f"{draft.label}: SGLang {version} has no drafter class {arch} ({elsewhere.kind}; SGLang has it "
                f"from {elsewhere.since})",
                f"use the image of track {', '.join(elsewhere.tracks)} ({', '.join(elsewhere.images)}); "
                f"this image's EAGLE-3 drafters: {known_drafters}",
            )
        raise UsageError(
            f"{draft.label}: SGLang {version} has no drafter class {arch}", f"its EAGLE-3 drafters: {known_drafters}"
        )
    if target.architecture is not None:
        if missing := installed.methods_missing(target.architecture, EAGLE3_TARGET_HOOKS):
            raise UsageError(
                f"{target.label}: SGLang {version}'s {target.architecture} lacks {', '.join(missing)}",
                "so it cannot feed an EAGLE-3 drafter (the server would stop after loading the weights)",
                "run baseline, or an image whose SGLang has EAGLE-3 support for this model",
            )
        if missing is None:
            log.note(f"could not tell from SGLang's source whether {target.architecture} supports EAGLE-3")
    return target


def _emit(text: str) -> int:
    """Write text to stdout and flush it now, not at exit, where a failure is a Python "Exception ignored". On a
    failure: one line (none for a reader gone away: 141, as a tool killed by SIGPIPE), and stdout pointed at
    /dev/null (Python flushes it again at exit)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    except OSError as exc:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if isinstance(exc, BrokenPipeError):  # `| head -1`
            return 141
        sys.stderr.write(f"entrypoint: error: cannot write to standard output: {exc.strerror or exc}\n")
        return 1


def _exec(argv: list[str], env: Mapping[str, str], name: str = "") -> NoReturn:
    try:
        os.execve(argv[0], argv, dict(env))
    except OSError as exc:
        raise ImageError(f"cannot start {name or argv[0]}: {exc.strerror or exc}") from None


def _check_config_file(cmd: options.Command) -> None:
    """SGLang's --config YAML is read by its parser: a FIFO there would hold the check (and the start) forever."""
    item = cmd.last("--config")
    if item is None or not item.value:
        return
    try:
        st = os.stat(item.value)
    except OSError:
        return  # missing or unreadable: SGLang's parser names it
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else "not a file"
        raise UsageError(f"{item.label()}: {kind}, not a YAML file", "give SGLang's --config a regular YAML file")


def _run(argv: list[str], environ: Mapping[str, str], log: Log) -> int:
    # Every secret this process can know, into errors.SECRETS before any check can show a value: the key files'
    # contents, the values after an option argparse would read as a key option, the keys in plain variables.
    for value in api_key.secrets(environ, argv):
        errors.SECRETS.add(value)
    try:
        loaded, plan_error = presets.load(environ), None
    except UsageError as exc:
        loaded, plan_error = None, exc
    spec = loaded.spec if loaded is not None else None
    request = parse(argv, spec, environ)
    if request.program is not None:
        name, *args = request.program
        if name in tools.TOOLS:
            _exec(*tools.command(name, args, spec, environ), name)
        try:
            os.execvpe(name, request.program, dict(environ))
        except OSError as exc:
            raise UsageError(f"cannot run {name}: {exc.strerror or exc}") from None
    if request.help:
        return _emit(helptext.render(spec, plan_error))
    if loaded is None:
        raise plan_error
    spec, mode = loaded.spec, loaded.spec.modes[request.mode]  # parse() took the mode from spec.modes

    if {"-h", "--help"} & set(request.sglang_args):  # SGLang's own help: nothing to check
        final = _sglang(request.sglang_args)
        if request.dry_run:
            return _emit(_shell_line(final, {}) + "\n")
        _exec(final, environ)

    environment.check(environ, spec)  # a typo'd variable, a key in a variable: before anything else reads them
    preflight.visible_devices(environ)  # the string alone (a GPU named twice): --dry-run checks it too
    cmd = assemble.build(spec, request.mode, environ, request.sglang_args, log)
    installed = sglang_source.locate()
    launcher_env = api_key.apply(cmd, environ, log, installed)  # first: the checks below show values, never a key
    options.check_spelling(cmd, installed.options() if installed else (), installed.version if installed else None)
    effective = assemble.effective(cmd, spec, request.mode, log)
    port = cmd.last("--port")
    if port is not None and port.source not in ("PORT", "default") and environ.get("PORT", "").strip() != port.value:
        log.warn(f"{port.label()}: the image's HEALTHCHECK reads PORT; set PORT={port.value} instead of --port")
    if installed is not None and installed.version and installed.version != spec.sglang_version:
        log.warn(f"the installed SGLang is {installed.version}, the presets are for {spec.sglang_version}")
    attn_tp = 1 if cmd.has("--enable-dp-attention") else effective.tp  # DP attention splits the heads otherwise
    target = _check_models(effective, installed, spec, log, attn_tp, cmd.has("--quantization"))
    rules.apply(spec, cmd, effective, models.quantization(target), target.path is not None, installed, environ, log)
    rules.left_out(spec, cmd, log)
    prebuilt.check(log)
    if not request.dry_run:  # the machine's checks are cheap: before SGLang's parser, which takes seconds to import
        gpus = preflight.visible_gpus(environ)
        what = tp_item.label() if (tp_item := cmd.last("--tp-size")) else "TP 1"
        if effective.pp > 1 or effective.nnodes > 1:
            what = f"TP {effective.tp} x PP {effective.pp} over {effective.nnodes} nodes"
        preflight.check_gpus(gpus, effective.gpus_per_node, what, spec.cuda_archs, log)
        preflight.check_shm(effective.gpus_per_node, log)
        preflight.check_caches(environ.get("SM120_CACHE_DIR") or spec.cache_dir, environ, log)
        host, port = cmd.last("--host"), cmd.last("--port")  # always set (build's defaults), checked by effective()
        what = port.label() if port.source != "default" else f"{host.label()}, port {port.value}"
        preflight.check_port(host.value, int(port.value), what)
    relied_on = set(options.RELIED_ON) | set(assemble.INTEGERS)
    relied_on |= {options.canonical(a) for r in [*spec.runtime, *spec.left_out] for a in r.args if options.is_option(a)}
    _check_config_file(cmd)
    checked = parser_check.check(cmd, installed, environ, log, relied_on)
    final = _sglang(cmd.argv())

    if request.dry_run:
        log.flush(sys.stderr)
        lines = [f"# mode {request.mode}: SGLang {spec.sglang_version} presets from {loaded.source}", f"# {checked}"]
        if mode.draft:
            lines.append(f"# draft tree: {_draft_tree(cmd, mode, request.mode)}")
        lines.append("# not run by --dry-run: the GPU, /dev/shm and JIT-cache checks")
        lines.append(_shell_line(final, cmd.env))
        return _emit("".join(f"{line}\n" for line in lines))

    exec_env = dict(cmd.env)
    if launcher_env is not None:
        final = api_key.exec_argv(final[0], cmd)
        exec_env.update(launcher_env)
    log.flush(sys.stderr)
    sys.stderr.write(f"[entrypoint] exec {_shell_line(final, exec_env)}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    _exec(final, {**environ, **exec_env})


def main(argv: list[str], environ: Mapping[str, str] | None = None) -> int:
    """The entrypoint; everything it writes goes through errors.Redacted (the one redaction step)."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = errors.Redacted(sys.stdout), errors.Redacted(sys.stderr)  # type: ignore[assignment]
    try:
        return _run(list(argv), dict(os.environ) if environ is None else environ, Log())
    except UsageError as exc:
        sys.stderr.write(exc.render())
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except RecursionError:  # a value nested beyond reason (a config.json, a plan) that a check walked into
        sys.stderr.write("entrypoint: error: an input is nested too deeply to check (a config.json or the plan)\n")
        return 2
    except Exception as exc:  # a bug here must not hide the request behind a traceback: one line, exit 1
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        text = errors.clip(errors.one_line(f"{type(exc).__name__}: {exc}"), 300)
        sys.stderr.write(f"entrypoint: internal error{where}: {text} (please report it)\n")
        return 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        sys.stdout, sys.stderr = streams
        errors.SECRETS.clear()
