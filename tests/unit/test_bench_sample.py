"""T0: docs/bench-sample is what `build.py bench` wrote (against the stand-in server), not a hand-made table."""

from __future__ import annotations

from pathlib import Path

from sm120.bench import report, results

SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "bench-sample"


def test_the_sample_markdown_is_the_report_of_the_sample_json():
    # Summaries and speedups are recomputed from the runs in bench.json: a changed figure or format shows here.
    loaded = results.load(SAMPLE / "bench.json")
    assert (SAMPLE / "bench.md").read_text(encoding="utf-8") == report.markdown(loaded)


def test_the_sample_is_labelled_as_a_stand_in_measurement():
    loaded = results.load(SAMPLE / "bench.json")
    assert set(loaded.labels) == {"baseline", "eagle3"}
    for label in loaded.labels.values():
        assert label.server["version"].endswith("stand-in")
        assert len(label.runs) == loaded.settings["runs"] == 10
    assert (SAMPLE / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
