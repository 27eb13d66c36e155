"""The SGLang patches against real releases: `patching` (variants, the image's engine), `pypi` (releases, wheels)."""
