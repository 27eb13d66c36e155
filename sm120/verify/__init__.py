"""`build.py verify`: prove, without a GPU, that an image is what its labels (sm120/plan/labels.py) and its plan.json
(sm120/plan/image_plan.py) say, never build.toml; the checks are in sm120/verify/suite/ (pytest + testinfra)."""
