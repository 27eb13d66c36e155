"""The container entrypoint, one module per concern (standard library only: it runs in the image as is); main.py
orders the checks, cheap ones first, then execs SGLang."""
