"""What runs inside the image: the entrypoint, the all-reduce sweep, the patch engine and their errors. Standard
library only, importing nothing outside this package (tests/unit/test_layout.py; docs/architecture.md)."""
