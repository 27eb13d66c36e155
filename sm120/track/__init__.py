"""A new SGLang release as a track: its facts from PyPI (`facts`, `wheel_members`), its stanza (`stanza`)."""
