"""`allreduce-sweep`: SGLang's symmetric-memory two-shot all-reduce against NCCL on this machine's GPUs, and the
limit to set (SM120_SYMM_MEM_MAX_SIZES, read by the torch-symm-mem-sm120 patch). It runs in the image (the
entrypoint routes the word here); only `launch` and `worker` import torch, and only when they run: the rest is
standard library and is tested without a GPU.
"""
