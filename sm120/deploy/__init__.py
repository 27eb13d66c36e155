"""Deployment manifests written from the plan: a kustomization for Kubernetes (`kubernetes`)."""
