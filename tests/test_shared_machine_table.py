"""scripts/shared_machine_table.py: the quiet / loaded table of docs/performance.md from benchmark JSON."""

import importlib.util
import json
import os
import statistics

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _module():
    path = os.path.join(HERE, "..", "scripts", "shared_machine_table.py")
    spec = importlib.util.spec_from_file_location("shared_machine_table", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_table_gives_ranges_medians_and_median_times_over_runs(tmp_path, capsys):
    smt = _module()
    rng = np.random.default_rng()
    docs = []
    for _ in range(3):
        info = {
            "quiet_ours_s": rng.uniform(1e-3, 2e-3),
            "loaded_ours_s": rng.uniform(2e-3, 4e-3),
            "quiet_ratio": rng.uniform(2, 3),
            "loaded_ratio": rng.uniform(1, 3),
            "goal": "kept >= 0.8",
        }
        info["kept"] = info["loaded_ratio"] / info["quiet_ratio"]
        docs.append(
            {
                "benchmarks": [
                    {"name": "test_compiled_op_quiet_and_loaded[lut_u8]", "extra_info": info},
                    {"name": "test_other", "extra_info": {"ratio": 2.0}},
                ]
            }
        )
    docs[1]["benchmarks"][0]["extra_info"]["loaded_mean_ratio"] = 0.5  # only some runs recorded means
    docs[2]["benchmarks"][0]["extra_info"]["loaded_mean_ratio"] = rng.uniform(1, 3)
    lines = smt.table(docs)
    assert len(lines) == 3  # header, rule, one row: benchmarks without 'kept' are not this suite's
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[0] == "`op[lut_u8]`"
    for cell, key in zip(cells[1:5], ("quiet_ratio", "loaded_ratio", "loaded_mean_ratio", "kept")):
        v = [d["benchmarks"][0]["extra_info"][key] for d in docs if key in d["benchmarks"][0]["extra_info"]]
        assert cell == f"{min(v):.2f}–{max(v):.2f} (**{statistics.median(v):.2f}**)"
    q = statistics.median(d["benchmarks"][0]["extra_info"]["quiet_ours_s"] for d in docs) * 1e3
    lo = statistics.median(d["benchmarks"][0]["extra_info"]["loaded_ours_s"] for d in docs) * 1e3
    assert cells[5] == f"{q:.2f} → {lo:.2f}" and cells[6] == "kept >= 0.8"
    for d in docs:
        d["benchmarks"][0]["extra_info"].pop("loaded_mean_ratio", None)
    assert smt.table(docs)[2].split("|")[4].strip() == "–"  # older runs: no means recorded
    paths = []
    for k, d in enumerate(docs):
        paths.append(str(tmp_path / f"{k}.json"))
        with open(paths[-1], "w") as f:
            json.dump(d, f)
    assert smt.main(paths) == 0 and "3 runs" in capsys.readouterr().out
    assert smt.main([]) == 2
