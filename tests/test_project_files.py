"""What a lab's legal and citation checks look for: a license, a citation file and a changelog, agreeing with
the package's own metadata (its license and version)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

from scaling.version import __version__

ROOT = Path(__file__).resolve().parents[1]


def test_license_citation_and_changelog_agree_with_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    license_name = project["license"]["text"]
    assert (ROOT / "LICENSE").read_text().startswith(f"{license_name} License\n")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == license_name and cff["title"] and cff["authors"]
    assert cff["version"] == project["version"] == __version__
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog") and "## [Unreleased]" in changelog
