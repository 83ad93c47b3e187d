"""The documentation that ships with the repository says what the code does, and its links lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT, load_script

from layergeom.configdoc import reference_markdown

headline = load_script(ROOT / "bench" / "headline.py")

#: the Markdown a user reads: the README, every page of docs/ and the configuration reference
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "config" / "README.md"]
#: the README is read in one sitting; the details live in docs/
README_MAX_LINES = 300

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the text outside fenced code blocks, inline code spans removed."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, INLINE_CODE.sub("", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation other than '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)  # code in a heading keeps its text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor, with GitHub's -1, -2, ... for repeated headings."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            k = seen.get(base, 0)
            seen[base] = k + 1
            out.add(base if k == 0 else f"{base}-{k}")
    return out


def broken_links(path: Path) -> list[str]:
    """Every relative link of a Markdown file whose file does not exist or whose #anchor is no heading of it."""
    problems = []
    for n, line in prose_lines(path.read_text()):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{n}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                problems.append(f"{where}: no heading with the anchor #{anchor} in {dest.name}")
    return problems


def test_config_reference_is_current():
    """config/README.md is rendered from the schemas (python tools/config_reference.py): every key, no stale one."""
    assert (ROOT / "config" / "README.md").read_text() == reference_markdown(), "run python tools/config_reference.py"


def test_every_relative_link_resolves():
    """Every relative link of the README, docs/*.md and config/README.md names a file that exists and, with an
    #anchor, a heading of that file."""
    problems = [p for path in DOCS for p in broken_links(path)]
    assert not problems, "\n".join(problems)


def test_the_link_check_catches_a_broken_link(tmp_path):
    """A missing file, a missing heading and a same-file anchor that no heading has are each caught; links in code
    and to the web are not checked."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Two words: `code`, too!\n\n## Two words: `code`, too!\n")
    readme = tmp_path / "README.md"
    good = [
        "[page](docs/page.md)",
        "[heading](docs/page.md#two-words-code-too)",
        "[repeat](docs/page.md#two-words-code-too-1)",
        "[self](#intro)",
        "[web](https://example.org/nowhere.md)",
        "`[code](missing.md)`",
    ]
    readme.write_text("# Intro\n\n" + "\n".join(good) + "\n\n```\n[fenced](missing.md)\n```\n")
    assert broken_links(readme) == []
    readme.write_text("# Intro\n\n[a](docs/gone.md)\n[b](docs/page.md#two-words)\n[c](#outro)\n![d](docs/figure.png)\n")
    problems = broken_links(readme)
    assert len(problems) == 4, problems
    assert "docs/gone.md: no such file" in problems[0]
    assert "no heading with the anchor #two-words in page.md" in problems[1]
    assert "#outro" in problems[2] and "figure.png: no such file" in problems[3]


def test_slug_follows_github():
    assert slug("5. Claims: do the papers' findings hold here?") == "5-claims-do-the-papers-findings-hold-here"
    assert slug("From Python: `layergeom.results.load`") == "from-python-layergeomresultsload"
    assert slug("Per model and checkpoint: `results/{model}/{checkpoint}/`") == (
        "per-model-and-checkpoint-resultsmodelcheckpoint"
    )
    assert slug("Models: `models.<name>`") == "models-modelsname"


def test_readme_fits_one_sitting():
    """The README stays short enough to read in one sitting: the details live in docs/."""
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines, more than {README_MAX_LINES}: move details to docs/"


def test_headline_tables_are_where_headline_py_reads_them():
    """`bench/headline.py --check` reads the default model's headline and claims tables from the README and
    Gemma-3-270M's from docs/runs.md (its --heading): each heading is there with its table under it."""
    shipped = [
        (ROOT / "README.md", headline.HEADING, "smollm2-135m"),
        (ROOT / "docs" / "runs.md", "A second real family offline (opt-in)", "gemma3-270m"),
    ]
    for path, heading, model in shipped:
        text = path.read_text()
        header, rows = headline.readme_table(text, heading)
        assert header == ["trained", "init"] and len(rows) == 14, (path, heading)
        header, rows = headline.readme_table(text, headline.claims_heading(model))
        assert header == ["init", "trained", "trained vs init"], (path, model)
        assert list(rows)[-1].startswith("verdicts:"), (path, model)
