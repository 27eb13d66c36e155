"""`allreduce-sweep` (docs/allreduce-sweep.md), run in the image: only `launch` and `worker` import torch, and only
when they run; the rest is standard library and is tested without a GPU."""
