#!/bin/sh
# Stands in for NVIDIA's /opt/nvidia/nvidia_entrypoint.sh (their images' ENTRYPOINT, which prints a banner
# and runs the command): an image built on these bases that forgets its own ENTRYPOINT behaves the same way.
exec "$@"
