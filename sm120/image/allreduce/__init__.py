"""`allreduce-sweep`: SGLang's symmetric-memory two-shot all-reduce against NCCL on this machine's GPUs, and the
limit to set (SM120_SYMM_MEM_MAX_SIZES, read by the torch-symm-mem-sm120 patch).

It runs in the image (`docker run --gpus all --ipc=host IMAGE allreduce-sweep`; the entrypoint routes the word
here) with the venv's torch and the installed SGLang. Only `launch` and `worker` import torch, and only when
they run: the rest is standard library and is tested without a GPU.

errors    one-line errors with their exit status (2: a mistake in the request, 1: the machine cannot)
sizes     message sizes: parsing (4K, 512KiB, 8M, 16MiB, ranges A..B), formatting, the bounds
cli       the command line (argparse, one-line errors) -> Options
machine   what the machine offers (GPUs, capability, P2P), checked against the request before any rank starts
report    the table, the crossover and the limit to set, from the measured rows
worker    one rank: NCCL and the gloo group as SGLang makes them, SGLang's TorchSymmMemCommunicator, the timings
launch    one process per GPU (torch.multiprocessing), a deadline, the ranks' results
__main__  the order of it all
"""
