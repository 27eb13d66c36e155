"""What runs inside the image: the entrypoint, the all-reduce sweep, the patch engine and their errors.

Standard library only, and importing nothing outside this package (tests/unit/test_layout.py): the Dockerfile copies
this folder whole (with sm120/__init__.py), and the host imports from here where it needs the same facts.
"""
