"""Build system for the SGLang image for NVIDIA Blackwell workstation GPUs (sm_120)."""
