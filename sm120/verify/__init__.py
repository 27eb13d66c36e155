"""`build.py verify`: prove, without a GPU, that an image is what its labels and its plan.json say.

The checks (sm120/verify/suite/, pytest + testinfra) read what an image promises from the image itself: its labels
(sm120/plan/labels.py) and the plan it was built from (sm120/plan/image_plan.py), never from build.toml.
"""
