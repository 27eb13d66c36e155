"""T0: docs/bench-sample is what `build.py bench` wrote (against the stand-in server), not a hand-made table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120.bench import report, results

SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "bench-sample"


def _schema() -> object:
    try:
        return json.loads((SAMPLE / "bench.json").read_text(encoding="utf-8")).get("schema")
    except (OSError, ValueError, AttributeError):
        return None


pytestmark = pytest.mark.skipif(
    _schema() != results.SCHEMA,
    reason=f"docs/bench-sample/bench.json is not of schema {results.SCHEMA} yet: it is regenerated with the new bench",
)


def test_the_sample_markdown_is_the_report_of_the_sample_json():
    # Summaries and speedups are recomputed from the runs in bench.json: a changed figure or format shows here.
    loaded = results.load(SAMPLE / "bench.json")
    assert (SAMPLE / "bench.md").read_text(encoding="utf-8") == report.markdown(loaded.to_dict())


def test_the_sample_is_labelled_as_a_stand_in_measurement():
    loaded = results.load(SAMPLE / "bench.json")
    assert list(loaded.labels) == ["baseline", "eagle3"]
    concurrency = loaded.settings["concurrency"]
    assert concurrency == sorted(concurrency) and len(concurrency) >= 2
    for label in loaded.labels.values():
        assert label.server["version"].endswith("stand-in") and label.status == "complete"
        assert sorted({run["concurrency"] for run in label.runs}) == concurrency
        assert len(label.runs) == len(concurrency) * loaded.settings["runs"]
    assert "Measured against a stand-in server, not SGLang" in (SAMPLE / "bench.md").read_text(encoding="utf-8")
    assert (SAMPLE / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
