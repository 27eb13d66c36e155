"""The image's health probe (the HEALTHCHECK's command, also `IMAGE health`): the plan's probe route on this
container's port, with the plan's timeout (build.toml [tracks."X".probe], the one source Compose and Kubernetes
read too)."""
