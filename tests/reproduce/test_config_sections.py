"""ReproduceConfig in sections (issue 60): every field is ``section.field`` in ``--set``, the presets and
``config.json``; the flat names of format /3 are refused naming the new one, and a folder that recorded them
resumes (the four committed examples among them)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from invfast.reproduce.config import FLAT_NAMES, REMOVED_FIELDS, ReproduceConfig
from invfast.reproduce.findings import select
from invfast.reproduce.folders import FLAT_FORMAT, FORMAT, ConfigMismatchError, claim_folder
from invfast.reproduce.presets import PRESETS, parse_override, preset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = {"": None, "ericsson": "ericsson", "speicher": "speicher", "chavhan": "chavhan"}


def _claim(folder, cfg):
    claim_folder(
        str(folder), cfg.claim_dict(), "cache folder", ReproduceConfig.added_fields(), ReproduceConfig.removed_at()
    )


def test_every_field_has_one_flat_name_and_one_section():
    names = ReproduceConfig.field_names()
    assert sorted(FLAT_NAMES.values()) == sorted(names) and len(set(FLAT_NAMES.values())) == len(FLAT_NAMES)
    assert all(n.count(".") == 1 and n.split(".")[0] in ReproduceConfig.sections() for n in names)
    assert set(ReproduceConfig.groups()) == set(ReproduceConfig.sections())
    assert not set(FLAT_NAMES) & set(REMOVED_FIELDS)
    cfg = preset("quick")
    assert cfg.pretrain.epochs == cfg.get("pretrain.epochs") == cfg.flat()["pretrain.epochs"] == 35
    assert ReproduceConfig().with_values(cfg.flat()) == cfg  # the dotted names say everything
    assert json.loads(json.dumps(cfg.to_dict()))["pretrain"]["epochs"] == 35  # --print-config: by section


@pytest.mark.parametrize("flat", sorted(FLAT_NAMES))
def test_a_flat_name_is_refused_naming_the_new_one(flat):
    new = FLAT_NAMES[flat]
    with pytest.raises(ValueError) as err:
        parse_override(f"{flat}=1")
    if flat in ("findings", "preset"):  # their own options, not their new names, are what a user needs
        assert str(err.value).startswith(f"--set: config field {flat!r} is not set with --set; ")
    else:
        assert str(err.value) == f"--set: config field {flat!r} is now {new!r} (fields are named section.field)"
    with pytest.raises(ValueError, match=f"^config field {flat!r} is now {new!r}"):
        preset("tiny", {flat: 1})


def test_set_reads_dotted_names_and_refuses_what_it_does_not_set():
    assert parse_override("pretrain.epochs=20") == ("pretrain.epochs", 20)
    assert parse_override("speicher.categories=translate,hue+brightness") == (
        "speicher.categories",
        ("translate", "hue+brightness"),
    )
    assert parse_override("data.transforms=translate+rotate+hue") == ("data.transforms", ("translate", "rotate", "hue"))
    for text, words in (
        ("run.findings=E1", "select findings with --findings or --paper"),
        ("findings=E1", "select findings with --findings or --paper"),
        ("preset=full", "choose it with --preset"),
        ("run.preset=full", "choose it with --preset"),
        ("pretrain.nope=1", "unknown config field 'pretrain.nope'"),
        ("nope.epochs=1", "unknown config field 'nope.epochs'"),
        ("pretrain=1", "unknown config field 'pretrain'"),
        ("pretrain.epochs", "--set takes SECTION.FIELD=VALUE"),
    ):
        with pytest.raises(ValueError, match=words):
            parse_override(text)
    for name in PRESETS:  # every preset names its fields by section
        assert all("." in k for k in PRESETS[name])


@pytest.mark.parametrize("sub", sorted(EXAMPLES))
def test_the_committed_examples_made_under_flat_names_resume(tmp_path, sub):
    """The examples' config.json (format /3, flat names) is the configuration `--quick` with its selection
    makes today: their caches resume, and the claim rewrites config.json in this format."""
    source = os.path.join(ROOT, "docs", "example-report", sub, "config.json")
    saved = json.load(open(source, encoding="utf-8"))
    assert saved["format"] == FLAT_FORMAT and "pretrain_epochs" in saved["config"]
    shutil.copy(source, tmp_path / "config.json")
    cfg = preset("quick", {"run.findings": select(None, EXAMPLES[sub])})
    _claim(tmp_path, cfg)
    now = json.loads((tmp_path / "config.json").read_text())
    assert now == {"format": FORMAT, "config": json.loads(json.dumps(cfg.claim_dict()))}
    _claim(tmp_path, cfg)  # and again, in the new format


def test_a_flat_folder_of_another_configuration_is_refused_with_the_dotted_options(tmp_path):
    cfg = preset("quick")
    flat = {old: cfg.claim_dict()[new] for old, new in FLAT_NAMES.items() if new in cfg.claim_dict()}
    assert flat["pretrain_epochs"] == 35
    flat["pretrain_epochs"], flat["vit_lr"] = 99, 0.01
    (tmp_path / "config.json").write_text(json.dumps({"format": FLAT_FORMAT, "config": flat}))
    with pytest.raises(ConfigMismatchError) as err:
        _claim(tmp_path, cfg)
    msg = str(err.value)
    # vit.lr is at its value of before, so today's claim leaves it out: still named, and its option too
    assert "pretrain.epochs: folder has 99, this run has 35" in msg and "vit.lr: folder has 0.01, this run" in msg
    assert "add: --set pretrain.epochs=99 --set vit.lr=0.01)" in msg
    assert json.loads((tmp_path / "config.json").read_text())["format"] == FLAT_FORMAT  # left as it was
    _claim(tmp_path, cfg.with_values({"pretrain.epochs": 99, "vit.lr": 0.01}))  # the options it named resume it


def test_an_unknown_format_is_still_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"format": "invfast.reproduce/2", "config": {}}))
    with pytest.raises(ConfigMismatchError, match="made by another version"):
        _claim(tmp_path, preset("tiny"))


def test_a_section_of_the_wrong_type_is_one_error():
    from invfast.reproduce.config_sections import DataSettings

    with pytest.raises(TypeError, match="^config section pretrain must be a PretrainSettings, got DataSettings"):
        ReproduceConfig(pretrain=DataSettings())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"unknown section\(s\) \['epochs'\]"):
        ReproduceConfig().replace(epochs=3)
