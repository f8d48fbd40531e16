"""The user-facing text (README, docs, benchmarks, the package's source) speaks of the code,
and the API reference lists every public name."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: words that belong to how the project was made, not to what it does
# "turn", but not NUTS's "U-turn"
HISTORY = re.compile(r"\bsessions?\b|\btwenty-|(?<!U-)\bturn\b|\bissues?\s+#?\d+", re.IGNORECASE)

TEXT_SUFFIXES = {".py", ".md", ".rst", ".txt", ".toml", ".cfg", ".css", ".html", ".js"}


def _checked_files():
    yield ROOT / "README.md"
    for folder in ("docs", "benchmarks", "pymc_subsample"):
        for path in sorted((ROOT / folder).rglob("*")):
            parts = path.relative_to(ROOT).parts
            if "_build" in parts or "generated" in parts or "__pycache__" in parts:
                continue
            if path.is_file() and path.suffix in TEXT_SUFFIXES:
                yield path


def history_words(text):
    """Each match of the history words in ``text``, with its line number."""
    return [
        (text.count("\n", 0, m.start()) + 1, m.group(0)) for m in HISTORY.finditer(text)
    ]


@pytest.mark.parametrize(
    "text",
    [
        "measured in the ninth session",
        "Sessions of work",
        "before the twenty-second run",
        "at its turn",
        "fixed in issue 11",
        "see issues 10 and 13",
        "issue #47",
    ],
)
def test_history_words_are_found(text):
    assert history_words(text), text


@pytest.mark.parametrize(
    "text",
    ["returns the draws", "turned", "the return value", "tissue 5", "an issue with the data", "nocturne",
     "the No-U-Turn sampler", "a U-turn"],
)
def test_ordinary_words_pass(text):
    assert not history_words(text), text


def test_no_history_words_in_user_facing_text():
    found = []
    for path in _checked_files():
        for line, word in history_words(path.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{path.relative_to(ROOT)}:{line}: {word!r}")
    assert not found, "\n".join(found)


def test_checked_files_include_the_docs_and_the_package():
    names = {p.relative_to(ROOT).as_posix() for p in _checked_files()}
    assert "README.md" in names
    assert "pymc_subsample/__init__.py" in names
    assert "benchmarks/README.md" in names
    assert any(n.startswith("docs/") and n.endswith(".md") for n in names)


def test_api_reference_lists_every_public_name():
    import pymc_subsample
    from pymc_subsample import datasets

    api = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "api").glob("*.md"))
    names = [*pymc_subsample.__all__, *datasets.__all__]
    missing = [name for name in names if not re.search(rf"\b{name}\b", api)]
    assert not missing, f"not in docs/api/: {missing}"
