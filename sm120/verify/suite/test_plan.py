"""T2: the image carries the plan it was built from (/etc/sglang-sm120/plan.json, resolved once on the build's
host), and that plan is the one its labels come from: what verify and bench expect of an image is read from it."""

from __future__ import annotations


def test_the_images_plan_is_the_one_its_labels_come_from(plan, image, expect):
    wrong = {k: (v, image.labels.get(k)) for k, v in plan.labels.items() if image.labels.get(k) != v}
    assert not wrong, f"labels that differ from the image's plan.json (plan, image): {wrong}"
    assert (plan.sglang_version, plan.profile, plan.torch_version) == (expect.sglang, expect.profile, expect.torch)
    assert plan.tags and plan.entrypoint.sglang_version == plan.sglang_version
