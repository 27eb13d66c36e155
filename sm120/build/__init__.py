"""The image build: bases, build context, buildx, digests, image references, the Docker Engine, the SBOM."""
