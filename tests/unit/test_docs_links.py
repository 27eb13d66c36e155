"""T0: every relative link of README.md and docs/ resolves: the file or directory it names exists, and an `#anchor`
is a heading of the target Markdown file (GitHub's slugs) or an explicit anchor there. External links (http,
https, mailto) are not followed. Links inside code (fenced or indented blocks, `spans`) are not links."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

# [text](target "title") and ![alt](target); the target ends at whitespace or the closing parenthesis.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'][^\"']*[\"'])?\s*\)")
# [label]: target
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
HTML_ANCHOR = re.compile(r"<(?:a|span|div)\s[^>]*(?:name|id)=[\"']([^\"']+)[\"']", re.IGNORECASE)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def prose(text: str, *, spans: bool = False) -> str:
    """The page without its code: fenced blocks, indented blocks (after a blank line) and, unless `spans`, inline
    code spans are blanked (line count kept, so a message can name the line)."""
    out, fence, previous_blank, in_indented = [], None, True, False
    for line in text.splitlines():
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
            out.append("")
            continue
        m = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if m:
            fence = m[1]
            out.append("")
            continue
        if line.startswith(("    ", "\t")) and (previous_blank or in_indented) and stripped:
            in_indented = True
            out.append("")
            continue
        in_indented = in_indented and not stripped
        previous_blank = not stripped
        out.append(line if spans else re.sub(r"(`+)(?:(?!\1).)+?\1", lambda s: " " * len(s[0]), line))
    return "\n".join(out)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text (no markup), lower case, every character that is not
    a letter, a digit, a space, a hyphen or an underscore removed, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # _emphasis_ markers, not snake_case
    text = text.strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page has: its headings' slugs (a repeated one gets -1, -2, ... as GitHub numbers them) and
    explicit HTML anchors."""
    text = page.read_text()
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose(text, spans=True).splitlines():
        m = re.match(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = github_slug(m[2])
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    found |= set(HTML_ANCHOR.findall(text))
    return found


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every link on the page outside code."""
    text = prose(page.read_text())
    found = []
    for pattern in (INLINE_LINK, REFERENCE_DEFINITION):
        for m in pattern.finditer(text):
            found.append((text.count("\n", 0, m.start()) + 1, m[1]))
    return found


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def broken(page: Path, target: str) -> str | None:
    """Why a link target does not resolve, or None."""
    if not target or EXTERNAL.match(target):
        return None
    path_part, _, anchor = target.partition("#")
    path_part = unquote(path_part.split("?", 1)[0])
    resolved = page if not path_part else (page.parent / path_part).resolve()
    if path_part.startswith("/"):
        return "an absolute path: GitHub resolves it against the site, not the repository"
    if not resolved.exists():
        return f"{path_part} does not exist"
    if not anchor:
        return None
    if resolved.is_dir() or resolved.suffix != ".md":
        return f"#{anchor} points into {path_part or page.name}, which is not a Markdown page"
    if unquote(anchor) not in anchors(resolved):
        return f"{shown(resolved)} has no heading or anchor #{anchor}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    problems = [
        f"{shown(page)}:{line}: ({target}) {why}"
        for line, target in links(page)
        if (why := broken(page, target)) is not None
    ]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_readme_links_every_docs_page():
    """A person finds every page of docs/ from the README (the pages under docs/ subfolders are samples)."""
    linked = {(ROOT / t.split("#")[0]).resolve() for _, t in links(ROOT / "README.md") if t and not EXTERNAL.match(t)}
    unlinked = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked)
    assert not unlinked, f"README.md links no way to {unlinked}"


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        (
            "new-release.yml: a new SGLang release becomes a pull request",
            "new-releaseyml-a-new-sglang-release-becomes-a-pull-request",
        ),
        ("Benchmark: baseline vs EAGLE-3 (`build.py bench`)", "benchmark-baseline-vs-eagle-3-buildpy-bench"),
        ("`allreduce-sweep`: SGLang's two-shot all-reduce", "allreduce-sweep-sglangs-two-shot-all-reduce"),
        ("What SGLang decides on sm_120, per track", "what-sglang-decides-on-sm_120-per-track"),
        (
            "gpu-benchmark.yml: baseline vs EAGLE-3 on sm_120 GPUs (T4)",
            "gpu-benchmarkyml-baseline-vs-eagle-3-on-sm_120-gpus-t4",
        ),
        ("Size: what the runtime image *leaves out*", "size-what-the-runtime-image-leaves-out"),
        ("A [linked](x.md) heading — with a dash", "a-linked-heading--with-a-dash"),
        ("Über Größe", "über-größe"),
    ],
)
def test_github_slugs(heading, slug):
    assert github_slug(heading) == slug


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## A section\n\n## A section\n")
    page.write_text(
        "# Page\n\n[ok](other.md#a-section) [ok too](other.md#a-section-1) [self](#page)\n"
        "[gone](missing.md) [no anchor](other.md#nope) `[in code](missing.md)`\n\n"
        "    [indented code](missing.md)\n\n```\n[fenced](missing.md)\n```\n[web](https://example.com/x#y)\n"
    )
    found = {target: broken(page, target) for _, target in links(page)}
    assert found == {
        "other.md#a-section": None,
        "other.md#a-section-1": None,
        "#page": None,
        "missing.md": "missing.md does not exist",
        "other.md#nope": "other.md has no heading or anchor #nope",
        "https://example.com/x#y": None,
    }
