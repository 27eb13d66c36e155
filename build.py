#!/usr/bin/env python3
"""build.py: plan, build, patch, verify and benchmark the SGLang sm_120 image (see README.md)."""

import sys

from sm120.cli import main

if __name__ == "__main__":
    sys.exit(main())
