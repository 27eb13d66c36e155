"""`build.py verify`: prove, without a GPU, that an image is what its labels and its plan.json say.

The checks are a pytest + testinfra suite (sm120/verify/suite/) run against containers of the image. What an image
promises is read from the image itself: its labels (sm120/plan/labels.py `parse`) and the plan it was built from
(sm120/plan/image_plan.py: /etc/sglang-sm120/plan.json, resolved once on the build's host), never from build.toml.
This package holds the Docker side (`docker_env`: inspect, start and always remove containers, copy files), the ELF
side (`elf`: SASS archs with cuobjdump, unresolved libraries from ldd), the start-up check's host side (`startup`,
`persona`; `startup_probe` runs in the image), what the suite copies into containers (`behaviour`,
`sgl_kernel_standin`, `model_configs`), the report and table (`report`), and the run itself (`runner`).
"""
