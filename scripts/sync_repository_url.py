"""Write the repository URL set in _config.yml into every copy of it (notebooks, README, book pages).

The one place to change when publishing a fork is ``repository.url`` (and ``repository.branch``) in
``_config.yml``. This script rewrites the two forms in which the URL is copied elsewhere:

- the pip requirement that installs the package in Colab: ``capsule-lab @ git+<url>``
  (``git+https://github.com/OWNER/NAME``);
- the Colab link to a notebook: ``https://colab.research.google.com/github/OWNER/NAME/blob/BRANCH/``;
- the link to a file that only the repository has (a pip install has no ``scripts/`` or ``tests/``):
  ``https://github.com/OWNER/NAME/blob/BRANCH/scripts/…`` (or ``tests/…``).

Usage (from the repository root; ``make sync-url`` runs the first):

    python scripts/sync_repository_url.py                 # rewrite every copy that disagrees
    python scripts/sync_repository_url.py --check         # exit 1 and list the copies that disagree
    python scripts/sync_repository_url.py chapters book   # only these files or folders

Files are edited as text (a notebook's JSON stays byte for byte the same apart from the URL), so cell
outputs, tags and metadata are untouched. Other GitHub links (to other projects) are left alone.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "_config.yml"
# Where copies of the URL live, relative to the repository root.
DEFAULT_TARGETS = ("README.md", "book", "chapters", "solutions", "exercises")
SUFFIXES = (".md", ".ipynb")

_GITHUB_REPO = r"https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?"
PIP_URL = re.compile(r"git\+(" + _GITHUB_REPO + r")(?=[\"'@#\s\\)`]|\.git|$)")
COLAB_URL = re.compile(
    r"https://colab\.research\.google\.com/github/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/blob/([A-Za-z0-9_./-]+?)/"
    r"(?=(?:chapters|exercises|solutions)/)")
FILE_URL = re.compile(r"(" + _GITHUB_REPO + r")/blob/([A-Za-z0-9_./-]+?)/(?=(?:scripts|tests)/)")


@dataclass(frozen=True)
class Repository:
    """The published repository: ``url`` = https://github.com/OWNER/NAME, ``branch`` = e.g. main."""

    url: str
    branch: str

    @property
    def slug(self) -> str:
        """OWNER/NAME."""
        return self.url.removeprefix("https://github.com/")

    def pip_url(self) -> str:
        return f"git+{self.url}"

    def colab_prefix(self) -> str:
        return f"https://colab.research.google.com/github/{self.slug}/blob/{self.branch}/"

    def file_prefix(self) -> str:
        return f"{self.url}/blob/{self.branch}/"


def read_repository(config_path: Path) -> Repository:
    """The ``repository`` section of _config.yml; raises ValueError unless it is a GitHub URL and a branch."""
    config = yaml.safe_load(Path(config_path).read_text(encoding="utf8")) or {}
    section = config.get("repository") or {}
    url = str(section.get("url", "")).rstrip("/")
    branch = str(section.get("branch", "main"))
    if not re.fullmatch(r"https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", url):
        raise ValueError(f"{config_path}: repository.url must be https://github.com/OWNER/NAME, got {url!r}")
    if not re.fullmatch(r"[A-Za-z0-9_./-]+", branch):
        raise ValueError(f"{config_path}: repository.branch must be a branch name, got {branch!r}")
    return Repository(url=url.removesuffix(".git"), branch=branch)


def rewrite(text: str, repo: Repository) -> tuple[str, list[str]]:
    """``text`` with every copy of the URL set to ``repo``, and the copies that differed (as found)."""
    if not isinstance(text, str):
        raise ValueError("text must be a str")
    found: list[str] = []

    def pip(match: re.Match) -> str:
        if match.group(1) != repo.url:
            found.append(match.group(0))
        return repo.pip_url()

    def colab(match: re.Match) -> str:
        if match.group(0) != repo.colab_prefix():
            found.append(match.group(0))
        return repo.colab_prefix()

    def file(match: re.Match) -> str:
        if match.group(0) != repo.file_prefix():
            found.append(match.group(0))
        return repo.file_prefix()

    text = PIP_URL.sub(pip, text)
    text = COLAB_URL.sub(colab, text)
    text = FILE_URL.sub(file, text)
    return text, found


def target_files(targets: list[str], root: Path = ROOT) -> list[Path]:
    """The .md and .ipynb files named by ``targets`` (files or folders, relative to ``root``), sorted."""
    files: set[Path] = set()
    for target in targets:
        path = (root / target).resolve()
        if path.is_dir():
            files.update(p for p in path.rglob("*") if p.suffix in SUFFIXES and ".ipynb_checkpoints" not in p.parts)
        elif path.is_file():
            files.add(path)
        else:
            raise ValueError(f"{target}: no such file or folder under {root}")
    return sorted(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help=f"files or folders (default: {' '.join(DEFAULT_TARGETS)})")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a copy disagrees")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    repo = read_repository(root / CONFIG)
    stale = 0
    for path in target_files(args.paths or list(DEFAULT_TARGETS), root):
        text = path.read_text(encoding="utf8")
        new, found = rewrite(text, repo)
        if not found:
            continue
        stale += len(found)
        where = path.relative_to(root)
        for old in found:
            print(f"{where}: {old}" + ("" if args.check else f"  ->  {repo.url} ({repo.branch})"))
        if not args.check:
            path.write_text(new, encoding="utf8")
    if args.check and stale:
        print(f"{stale} cop{'y' if stale == 1 else 'ies'} of the repository URL disagree with {CONFIG} "
              f"({repo.url}, branch {repo.branch}): run `make sync-url`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
