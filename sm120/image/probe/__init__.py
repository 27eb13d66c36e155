"""The image's health probe (the HEALTHCHECK's command, also `IMAGE health`): build.toml's [tracks."X".probe]."""
