"""The container entrypoint, one module per concern (standard library only: it runs in the image as is).

invocation     the entrypoint's own arguments: mode, --dry-run, --help, `--`, a program on PATH
presets        the plan baked into the image (/etc/sglang-sm120/plan.json, or $SM120_PLAN)
options        SGLang options as items with a source, and the precedence preset < environment < `--`
command        the environment variables -> the SGLang command; effective values, validated
models         model directories: config.json, the EAGLE-3 drafter, NVFP4 detection
sglang_source  what the installed SGLang has, read from its files without importing it
rules          build.toml's runtime rules (what sm_120 needs) and the flags left out
parser_check   the command parsed by SGLang's own CLI parser, in a child interpreter
preflight      GPUs (NVML or nvidia-smi), /dev/shm, the JIT cache directories
main           the order of it all, and the exec
"""
