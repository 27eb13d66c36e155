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
environment    the container's variables against those the image reads: a near miss or a key in a variable is exit 2
key_file       API_KEY_FILE's and ADMIN_API_KEY_FILE's keys: read and checked, never shown (also `bench --api-key-file`)
api_key        the keys in the command (`--api-key ********`), the admin routes closed, the refusals, the warning,
               the exec through the launcher, the secrets the process knows
_with_api_key  the launcher: in SGLang's interpreter, adds --admin-api-key=KEY and --api-key=KEY to sys.argv and
               masks them on stdout/stderr
preflight      GPUs (NVML or nvidia-smi), /dev/shm, the JIT cache directories
errors         one-line errors, the log, and the one redaction step all output passes through (errors.SECRETS)
main           the order of it all, and the exec
"""
