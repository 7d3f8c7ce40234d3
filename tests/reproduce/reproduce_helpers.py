"""Checks of a finished ``invfast reproduce`` run's ``results.json`` that several end-to-end tests share."""

from __future__ import annotations

from typing import Any

from invfast.reproduce.finding import model_matches
from invfast.reproduce.findings import by_id


def unresolved_model_keys(results: dict[str, Any]) -> list[str]:
    """``'<finding> seed <s>: <pattern>'`` for every model pattern of a finding's record (``Finding.models``) that
    no '<model> learned' precondition of that seed's verdict matches: a model key the stages never produce (a
    misspelt or renamed name), which would leave the finding *not testable* on every run."""
    out = []
    for seed, per in results["per_seed"].items():
        for f in per["findings"]:
            if "verdict" not in f:  # not run: a stage it needs did not run
                continue
            learned = [
                p["name"].removesuffix(" learned")
                for p in f["verdict"]["preconditions"]
                if p["name"].endswith(" learned") and p["detail"] != "no learning number"
            ]
            out += [
                f"{f['id']} seed {seed}: {m}"
                for m in by_id(f["id"]).models
                if not any(model_matches(m, k) for k in learned)
            ]
    return sorted(set(out))
