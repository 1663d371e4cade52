"""The documentation's math renders offline: every formula of docs/ typesets with the KaTeX vendored
in docs/assets/katex, which the site loads by relative paths only.

The pages are converted by Python-Markdown with pymdownx.arithmatex as mkdocs.yml configures it,
then opened in headless Chromium with the network off, beside a copy of docs/assets and docs/js
laid out as in the built site: a formula KaTeX refuses, a missing font or any request that fails
fails the test.
"""

from __future__ import annotations

import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import markdown
import pytest
import yaml

DOCS = Path(__file__).resolve().parents[1] / "docs"
CONFIG = Path(__file__).resolve().parents[1] / "mkdocs.yml"


def chromium_or_skip() -> str:
    exe = os.environ.get("SCALING_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).is_file():
        pytest.skip("Chromium is not installed (set $SCALING_CHROMIUM or install Debian's chromium)")
    pytest.importorskip("playwright")
    return exe


def mkdocs_config() -> dict:
    """mkdocs.yml without its ``!!python/name`` tags (none is used by what is checked here)."""
    return yaml.load(CONFIG.read_text(), Loader=yaml.BaseLoader)


def math_pages() -> dict[str, str]:
    """page path -> its HTML, as arithmatex (generic mode) writes it, for each page with math."""
    pages = {}
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        html = markdown.markdown(text, extensions=["tables", "attr_list", "pymdownx.superfences",
                                                   "pymdownx.arithmatex"],
                                 extension_configs={"pymdownx.arithmatex": {"generic": True}})
        if 'class="arithmatex"' in html:
            pages[str(path.relative_to(DOCS))] = html
    return pages


def test_mkdocs_loads_the_vendored_katex_by_relative_paths() -> None:
    config = mkdocs_config()
    assets = [*config["extra_css"], *config["extra_javascript"]]
    assert "assets/katex/katex.min.css" in assets and "assets/katex/katex.min.js" in assets
    assert "js/katex-render.js" in assets
    assert all(not re.match(r"(?:[a-z]+:)?//", a) for a in assets), assets
    assert [a for a in assets if not (DOCS / a).is_file()] == []
    ext = [e for e in config["markdown_extensions"] if isinstance(e, dict) and "pymdownx.arithmatex" in e]
    assert ext and ext[0]["pymdownx.arithmatex"]["generic"] == "true"
    css = (DOCS / "assets/katex/katex.min.css").read_text()
    fonts = re.findall(r"url\(([^)]+)\)", css)
    assert fonts and all(not re.match(r"(?:[a-z]+:)?//", f) for f in fonts)
    assert [f for f in fonts if not (DOCS / "assets/katex" / f).is_file()] == []


def test_the_laws_are_written_as_tex() -> None:
    pages = math_pages()
    for page in ("fitting.md", "downstream.md", "hyperparameters.md", "moe-laws.md", "curves.md"):
        assert page in pages, f"{page} has no math"


def test_every_formula_renders_offline_with_the_vendored_katex(tmp_path: Path) -> None:
    chromium = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    site = tmp_path / "site"
    shutil.copytree(DOCS / "assets", site / "assets")
    shutil.copytree(DOCS / "js", site / "js")
    pages = math_pages()
    for i, (name, body) in enumerate(pages.items()):
        page_dir = site / f"page{i}"
        page_dir.mkdir()
        (page_dir / "index.html").write_text(
            '<!doctype html><html><head><meta charset="utf-8">'
            '<link rel="stylesheet" href="../assets/katex/katex.min.css"></head><body>'
            f"<h1>{name}</h1>{body}"
            '<script src="../assets/katex/katex.min.js"></script><script src="../js/katex-render.js"></script>'
            "</body></html>", encoding="utf-8")
    failed: list[str] = []

    def render() -> None:  # in a thread of its own: no event loop another test left in this one can get in the way
        _render(sync_playwright, chromium, site, pages, failed)

    with ThreadPoolExecutor(1) as pool:
        pool.submit(render).result()
    assert failed == []


def _render(sync_playwright: Any, chromium: str, site: Path, pages: dict[str, str], failed: list[str]) -> None:
    """Open each page offline in Chromium; each formula typeset, no error, KaTeX's fonts loaded."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            context = browser.new_context(offline=True)
            for i, name in enumerate(pages):
                page = context.new_page()
                page.on("requestfailed", lambda r: failed.append(f"{name}: {r.url}"))
                page.on("pageerror", lambda e: failed.append(f"{name}: {e}"))
                page.goto((site / f"page{i}" / "index.html").as_uri(), wait_until="load")
                result = page.evaluate("""async () => {
                    await document.fonts.ready;
                    const all = Array.from(document.querySelectorAll('.arithmatex'));
                    return {
                        total: all.length,
                        typeset: all.filter(e => e.querySelector('.katex')).length,
                        errors: all.filter(e => e.classList.contains('arithmatex-error'))
                                   .map(e => e.title + ' in ' + e.textContent.slice(0, 80)),
                        fonts: Array.from(document.fonts).filter(f => f.family.includes('KaTeX')
                                                                      && f.status === 'loaded').length,
                    };
                }""")
                assert result["errors"] == [], f"{name}: {result['errors']}"
                assert result["total"] > 0 and result["typeset"] == result["total"], (name, result)
                assert result["fonts"] > 0, f"{name}: no KaTeX font loaded"
                page.close()
        finally:
            browser.close()
