"""The names a BLIS user passes for a model, mapped to the fitted model they mean.

BLIS's `--model` is a Hugging Face id (`meta-llama/Llama-2-7b-hf`, lower-cased by its CLI);
the ground truth keys models by short name (`llama-2-7b`). Every experiment config carries
both, so the emitted constructor accepts both without the user listing them; `--alias
NAME=MODEL` (parse_alias) adds names the data does not know.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from evaluator.data import GroundTruth

from .emit import GoEmitError

__all__ = ["model_aliases", "parse_alias", "merge_aliases"]


def model_aliases(gt: GroundTruth, models: Iterable[str] | None = None) -> dict[str, str]:
    """HF id (as the experiment config spells it) -> short model name, for `models` (default all)."""
    keep = set(models) if models is not None else None
    out: dict[str, str] = {}
    for e in gt.experiments:
        if (keep is None or e.model in keep) and e.model_id and e.model_id.lower() != e.model.lower():
            out[e.model_id] = e.model
    return out


def parse_alias(text: str) -> tuple[str, str]:
    """'NAME=MODEL' -> (NAME, MODEL); a GoEmitError with the expected form otherwise."""
    name, sep, model = text.partition("=")
    if not sep or not name.strip() or not model.strip():
        raise GoEmitError(f"--alias {text!r}: expected NAME=MODEL, e.g. meta-llama/llama-2-7b-chat-hf=llama-2-7b")
    return name.strip(), model.strip()


def merge_aliases(gt: GroundTruth, models: Iterable[str], extra: Mapping[str, str] | None) -> dict[str, str]:
    """The data's HF ids plus `extra`; an extra alias naming a model that was not fitted is an error."""
    models = list(models)
    out = model_aliases(gt, models)
    for name, target in (extra or {}).items():
        if target not in models:
            raise GoEmitError(f"--alias {name}={target}: no fitted model {target!r} (known: {', '.join(sorted(models))})")
        out[name] = target
    return out
