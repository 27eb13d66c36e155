"""The container entrypoint, one module per concern (standard library only: it runs in the image as is).

invocation     the entrypoint's own arguments: mode, --dry-run, --help, `--`, a program on PATH
spec           plan.json's `entrypoint` key: the classes the build writes it with and this package reads it into
presets        loads the plan baked into the image (spec.PLAN_JSON_PATH, or $SM120_PLAN)
options        SGLang options as items with a source, and the precedence preset < environment < `--`
assemble       presets + environment variables + `--` -> the SGLang command (options.Command); effective values
models         model directories: config.json, the EAGLE-3 drafter, NVFP4 detection
sglang_source  what the installed SGLang has, read from its files without importing it
rules          build.toml's runtime rules (what sm_120 needs) and the flags left out
parser_check   the command parsed by SGLang's own CLI parser, in a child interpreter
key_file       API_KEY_FILE's key: read and checked, never shown (also used by `build.py bench --api-key-file`)
api_key        the key in the command (`--api-key ********`), the refusals, the warning, the exec through the launcher
_with_api_key  the launcher: in SGLang's interpreter, adds --api-key=KEY to sys.argv and masks it on stdout/stderr
preflight      GPUs (NVML or nvidia-smi), /dev/shm, the JIT cache directories
main           the order of it all, and the exec
"""
