"""`build.py verify`: prove, without a GPU, that an image is what its labels say.

The checks are a pytest + testinfra suite (sm120/verify/suite/) run against containers of the image; this package holds
what both the suite and the command need: the expectations read from the image's labels (`labels`, a re-export
of `sm120.labels`, where the plan's label writer sits beside the reader), the Docker
side (`docker_env`: inspect, start and always remove containers), the ELF side (`elf`: SASS archs with cuobjdump,
unresolved libraries from ldd), the report the suite writes and the table the command prints (`report`), and the
run itself (`runner`).
"""
