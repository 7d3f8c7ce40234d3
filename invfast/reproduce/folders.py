"""The folders of a reproduce run: held by one run at a time (:func:`hold`: locked, no link inside, every
write below them never through a link), claimed with ``config.json`` (a folder of another configuration or
of other files is refused), and whether the disk holds what a configuration needs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from typing import Any

from invfast.io import atomic_write_text, config_difference, output_lock, require_regular
from invfast.runtime.write_paths import clean_temporaries, refuse_links, write_root

CONFIG_FILE = "config.json"
#: the cache and results format; /2: the transfer models live in ``transfer/<source>/`` (Trainer runs);
#: /3: stage seeds and pretraining draws keyed by ``synthetic.rng.derive_seed``; /4: ``config.json`` names the
#: fields ``section.field`` (the cache is that of /3)
FORMAT = "invfast.reproduce/4"
#: the earlier format whose folders resume: its ``config.json`` named the fields flat (``pretrain_epochs``)
FLAT_FORMAT = "invfast.reproduce/3"


class ConfigMismatchError(ValueError):
    """An output or cache folder holds a run made with another configuration."""


@contextlib.contextmanager
def hold(folder: str, option: str, what: str) -> Iterator[None]:
    """``folder`` (the output folder, ``option`` '--out', or the cache, '--cache-dir') for one run: locked
    (a second run on it, from any output folder, is refused naming the holder), refused when a symbolic link
    lies anywhere inside it (named), every write below it refusing links and journaling its temporaries,
    and the temporaries a killed run left removed."""
    with output_lock(folder, "invfast reproduce", option):
        refuse_links(folder, what, option)
        with write_root(folder, what, option):
            clean_temporaries(folder)
            try:
                yield
            finally:
                with contextlib.suppress(OSError, ValueError):
                    clean_temporaries(folder)


def claim_folder(
    folder: str,
    config: dict[str, Any],
    what: str,
    added: dict[str, Any] | None = None,
    removed: dict[str, Any] | None = None,
) -> None:
    """Make ``folder`` hold ``config.json`` for ``config``; refuse a folder made with another one, saying which
    options would resume it (:func:`resume_options`; ``added``: the fields added since folders were made, at
    their value of before; ``removed``: fields removed since, at the one value they could hold, which a saved
    configuration may still record).

    A folder with other content but no config.json is refused too (never mixed with unrelated files).
    """
    path = os.path.join(folder, CONFIG_FILE)
    if os.path.exists(path):
        require_regular(path, f"{what} {folder!r}'s {CONFIG_FILE}")
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigMismatchError(
                f"{what} {folder!r} holds an unreadable {CONFIG_FILE} ({e}); delete the folder or choose another one"
            ) from None
        if not isinstance(saved, dict) or not isinstance(saved.get("config", {}), dict):
            raise ConfigMismatchError(
                f"{what} {folder!r} holds a {CONFIG_FILE} that is not an invfast reproduce configuration (a JSON "
                f"{type(saved).__name__}); delete the folder or choose another one"
            )
        recorded = recorded_config(saved)
        if recorded is None:
            raise ConfigMismatchError(
                f"{what} {folder!r} was made by another version of invfast reproduce (format "
                f"{saved.get('format')!r}, this one writes {FORMAT!r}), so it cannot be resumed; "
                "delete the folder or choose another one"
            )
        gone = removed or {}
        kept = {k: v for k, v in recorded.items() if not (k in gone and v == gone[k])}
        diff = config_difference(kept, config)
        if diff:
            again = resume_options(kept, config, added)
            raise ConfigMismatchError(
                f"{what} {folder!r} was made by a different configuration, so it cannot be resumed:\n  "
                + "\n  ".join(diff)
                + "\nUse another folder, delete this one, or rerun with the same settings"
                + (f" (to resume it as it was made, add: {' '.join(again)})." if again else ".")
            )
        if saved.get("format") != FORMAT:  # resumes: recorded as this format names it
            atomic_write_text(path, json.dumps({"format": FORMAT, "config": config}, indent=2))
        return
    if os.path.isdir(folder) and any(n for n in os.listdir(folder) if not n.startswith(".")):
        raise ConfigMismatchError(
            f"{what} {folder!r} exists and holds files that are not from invfast reproduce "
            f"(no {CONFIG_FILE}); choose an empty or new folder"
        )
    atomic_write_text(path, json.dumps({"format": FORMAT, "config": config}, indent=2))


#: fields a command-line option other than ``--set`` sets
_OPTIONS = {"run.seed": "--seed", "run.threads": "--threads", "run.workers": "--workers", "run.preset": "--preset"}


def recorded_config(saved: dict[str, Any]) -> dict[str, Any] | None:
    """The configuration a ``config.json`` document records, by ``section.field``: as written in this format, or,
    in format /3, its flat names (``pretrain_epochs``) read through :data:`~invfast.reproduce.config.FLAT_NAMES`
    (a name it does not know, a removed field, is kept as it was); None for any other format."""
    from invfast.reproduce.config import FLAT_NAMES

    config = saved.get("config", {})
    if saved.get("format") == FLAT_FORMAT:
        return {FLAT_NAMES.get(k, k): v for k, v in config.items()}
    return dict(config) if saved.get("format") == FORMAT else None


def _option_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def resume_options(saved: dict[str, Any], config: dict[str, Any], added: dict[str, Any] | None = None) -> list[str]:
    """The command-line options that make ``config`` the ``saved`` one: for each field they differ in, ``--set
    SECTION.FIELD=VALUE`` (or the field's own option, such as ``--seed``) with the saved value, or, for a field the
    saved configuration lacks because it was added later, its value of before (``added``, the config's
    ``added_fields()``; a config at that value lacks the field too, and the saved value is the option's); [] when
    some field differs in a way no option undoes."""
    added = added or {}
    out = []
    for key in sorted(set(saved) | set(config)):
        if key not in saved and key in added and key in config:
            value = added[key]
        elif key in saved and key in added and key not in config:
            value = saved[key]
        elif key not in saved or key not in config:
            return []
        elif saved[key] == config[key]:
            continue
        else:
            value = saved[key]
        if key == "run.findings":
            out.append(f"--findings {_option_value(value)}")
        elif key in _OPTIONS:
            out.append(f"{_OPTIONS[key]} {_option_value(value)}")
        elif value is None or (
            isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple, dict)) for v in value)
        ):
            return []
        else:
            out.append(f"--set {key}={_option_value(value)}")
    return out


def check_disk(folder: str, need_mb: float) -> None:
    """Raise OSError when the file system of ``folder`` has less than ``need_mb`` MiB free."""
    probe = os.path.abspath(folder)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    free = shutil.disk_usage(probe).free / 2**20
    if free < need_mb:
        raise OSError(
            f"not enough disk space for {folder!r}: {free:.0f} MiB free, this configuration needs about "
            f"{need_mb:.0f} MiB (checkpoints, features, measurement state); free some space or pass "
            "--cache-dir on another disk"
        )
