"""`--help`: the modes, the variables and the runtime rules, from the presets baked into the image."""

from __future__ import annotations

import textwrap

from .assemble import TREE_OPTIONS, VARIABLES
from .errors import UsageError
from .key_file import SECRET_PATH
from .rules import describe
from .spec import EntrypointSpec
from .tools import TOOLS

USAGE = """\
usage: docker run --gpus all --ipc=host -v /models:/models IMAGE [MODE] [--dry-run] [-- SGLANG-OPTIONS]
       docker run --gpus all --ipc=host IMAGE allreduce-sweep [--tp N] [--sizes LIST] [...]
       docker run IMAGE PROGRAM [ARGS...]     run a program on PATH instead (bash, python3, ...)
"""

OPTIONS = """\
options:
  --dry-run    run every check that needs no GPU, print the command (the last line of stdout), exit
  --help, -h   this text; `-- --help` prints SGLang's own options
  -- ...       everything after `--` goes to SGLang as it is, and wins over presets and variables
"""

EXAMPLES = f"""\
examples:
  docker run --gpus all --ipc=host -p 30000:30000 -v /models:/models \\
      -e MODEL_PATH=/models/Kimi-K2.5-NVFP4 -e TP_SIZE=8 IMAGE baseline
  docker run --gpus all --ipc=host -p 30000:30000 -v /models:/models \\
      -e MODEL_PATH=/models/Kimi-K2.5-NVFP4 -e DRAFT_MODEL_PATH=/models/Kimi-K2.5-eagle3 -e TP_SIZE=8 \\
      IMAGE eagle3 -- --mem-fraction-static 0.85
  with an API key (clients send `Authorization: Bearer KEY`; /health stays open for the HEALTHCHECK):
  docker run --gpus all --ipc=host -p 30000:30000 -v /models:/models -v /etc/sglang/key:{SECRET_PATH}:ro \\
      -e API_KEY_FILE={SECRET_PATH} -e MODEL_PATH=/models/Kimi-K2.5-NVFP4 -e TP_SIZE=8 IMAGE baseline
  with an API key, SGLang's admin routes are closed (it gets an admin key nobody knows, made at start, never shown);
  to open them, mount a second secret and set ADMIN_API_KEY_FILE=/run/secrets/admin_api_key (its one line is the
  admin key). A key in a variable (API_KEY=..., SGLANG_API_KEY=...) or on a command line (--api-key, --admin-api-key,
  a prefix argparse would take for one) is refused; so is --grpc-mode with a key (its gRPC server checks none).
  A variable the image does not read whose name resembles one it reads (TP_SZIE, MODEL_PATHS) is refused.
"""


def _mode_line(spec: EntrypointSpec, name: str) -> str:
    mode = spec.modes[name]
    preset = list(mode.args)
    if mode.draft and mode.draft_tree is not None:
        preset += [token for option, n in zip(TREE_OPTIONS, mode.draft_tree, strict=True) for token in (option, str(n))]
    default = " (default)" if name == spec.default_mode else ""
    text = f"{mode.summary}{default}" + (f": {' '.join(preset)}" if preset else "")
    if mode.draft:
        text += f". Draft tree: {mode.describe_draft_tree()}"
    return _wrapped(f"  {name:<10} ", text)


def _wrapped(head: str, text: str) -> str:
    return textwrap.fill(text, width=118, initial_indent=head, subsequent_indent=" " * len(head))


def render(spec: EntrypointSpec | None, plan_error: UsageError | None) -> str:
    out = [USAGE]
    if spec is None:
        out.append(f"(the image's presets cannot be read: {plan_error.lines[0] if plan_error else 'unknown'})\n")
        fmt: dict[str, object] = {}
    else:
        intro = (
            f"Starts SGLang {spec.sglang_version} (python3 -m sglang.launch_server) on NVIDIA GPUs of compute "
            f"capability {', '.join(spec.cuda_archs)} (sm_120: RTX PRO 6000 Blackwell, RTX 5090)."
        )
        out.append(_wrapped("", intro) + "\n")
        out.append("modes:")
        out += [_mode_line(spec, name) for name in spec.modes]
        out += [_wrapped(f"  {name:<16} ", summary) for name, (_, _, summary) in TOOLS.items()]
        out.append("")
        eagle = next((m for m in spec.modes.values() if m.draft), None)
        fmt = {"port": spec.port}
        for var in TREE_OPTIONS.values() if eagle is not None else ():
            fmt[var.lower()] = getattr(eagle, var.lower()) or "SGLang's choice; all three or none"
    out.append("environment variables (each checked; an empty value counts as unset, except PORT, which is refused):")
    for var in VARIABLES:
        try:
            text = var.help.format(**fmt)
        except (KeyError, IndexError):
            text = var.help.split(" (default")[0]
        out.append(_wrapped(f"  {var.name:<22} ", text + (f"  [{var.option}]" if var.option else "")))
    out.append("  precedence: presets < variables < EXTRA_ARGS < options after --\n")
    if spec is not None:
        out.append(f"runtime rules for sm_120 (SGLang {spec.sglang_version}; SKIP_RUNTIME_RULES=NAME leaves one out):")
        for rule in spec.runtime:
            needs = f"; needs the {rule.requires.patch} change" if rule.requires else ""
            out.append(_wrapped(f"  {rule.name:<18} ", f"{describe(rule)}  [when: {', '.join(rule.when)}{needs}]"))
        for entry in spec.left_out:
            out.append(_wrapped("  left out           ", f"{' '.join(entry.args)}: {entry.reason}"))
        out.append("")
    out.append(OPTIONS)
    out.append(EXAMPLES)
    return "\n".join(out)
