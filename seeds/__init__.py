"""Starting programs of every run, one file each; `load_seeds()` reads them in name order."""
from __future__ import annotations

from importlib import resources


def seed_sources() -> dict[str, str]:
    """name -> source of every seed program shipped in this package."""
    out = {}
    for f in sorted(resources.files(__package__).iterdir(), key=lambda p: p.name):
        if f.name.endswith(".py") and not f.name.startswith("_"):
            out[f.name[:-3]] = f.read_text()
    return out
