"""T2: what the runtime image leaves out (its plan's not_shipped: build.toml [[not_shipped]], each with its
reason and source) is not in the image, and FlashInfer cannot fetch kernels from the network at run time.

That serving needs none of it is shown elsewhere: SGLang's start-up on the sm_120 persona opens and imports none of
it (test_startup.py, an audit hook), the JIT suite compiles without it (test_jit.py), and every ELF file still
resolves its libraries (test_kernels.py)."""

from __future__ import annotations

import pytest


def test_the_images_venv_holds_none_of_what_its_plan_leaves_out(plan, py):
    globs = [glob for entry in plan.not_shipped for glob in entry.paths]
    if not globs:
        pytest.skip("the image's plan leaves nothing out")
    # matched as the build leaves them out (docker/stages/venv_copy.py: fnmatch on the path below site-packages,
    # where `*` spans directories), over the whole tree
    found = py(
        "import fnmatch, os\n"
        f"site = '/opt/venv/lib/python{plan.python_version}/site-packages'\n"
        f"globs = {globs!r}\n"
        "hits = {g: [] for g in globs}\n"
        "for root, dirs, files in os.walk(site):\n"
        "    for name in dirs + files:\n"
        "        rel = os.path.relpath(os.path.join(root, name), site)\n"
        "        for g in globs:\n"
        "            if fnmatch.fnmatchcase(rel, g) and len(hits[g]) < 3:\n"
        "                hits[g].append(rel)\n"
        "report(hits)\n"
    )
    present = {g: paths for g, paths in found.items() if paths}
    assert not present, f"the image ships what its plan leaves out: {present}"


def test_flashinfer_fetches_no_cubins_from_the_network(image, py):
    """FlashInfer downloads a missing cubin (its TRT-LLM kernels for sm_100: no sm_120 cubins exist, and
    flashinfer-cubin is not shipped) from FLASHINFER_CUBINS_REPOSITORY; the image points that at a local path that
    does not exist, so such a kernel fails here instead of reaching the network."""
    repository = image.env.get("FLASHINFER_CUBINS_REPOSITORY", "")
    assert repository.startswith("/") and "://" not in repository, f"FLASHINFER_CUBINS_REPOSITORY={repository!r}"
    found = py(
        "import os\n"
        "import flashinfer.jit.cubin_loader as loader\n"
        "report({'repository': loader.FLASHINFER_CUBINS_REPOSITORY, 'exists': os.path.exists("
        "loader.FLASHINFER_CUBINS_REPOSITORY)})\n"
    )
    assert found["repository"] == repository and not found["exists"], found
