"""The backend switch and the one dispatch table: modes, overrides, the table's contents against the
compiled core and the CUDA sources, the forced-kernel error, `invfast info`, and INVFAST_BACKEND misuse."""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

import invfast as ivf
from invfast import _loader, backend, backend_cli, dispatch
from invfast.ops import augment, hyper, invariance, synth, transforms_u8  # noqa: F401  (each registers its references)

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILT = _loader.load() is not None
needs_core = pytest.mark.skipif(not BUILT, reason="compiled core not built")


def _cuda_impls_in_sources() -> set[str]:
    """Op names registered for the CUDA dispatch key by the .cu sources (read from the text, independently
    of the dispatcher)."""
    names = set()
    for cu in (ROOT / "csrc").rglob("*.cu"):
        text = cu.read_text()
        for block in re.findall(r"TORCH_LIBRARY_IMPL\([^,]+,\s*CUDA,\s*m\)\s*\{(.*?)\}", text, re.S):
            names |= set(re.findall(r'm\.impl\("(\w+)"', block))
    return names


def _run(code: str, env_extra: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "invfast", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


def test_backend_info_keys():
    info = ivf.backend_info()
    for key in ("cpp", "cuda", "dali", "threads", "version", "torch", "compiled_ops", "mode", "dispatch"):
        assert key in info
    assert info["threads"] >= 1
    if info["cpp"]:
        assert {"pair_scores", "sqdist_logsumexp"} <= set(info["compiled_ops"])
    rows = {(r["op"], r["device"]): r for r in info["dispatch"]}
    assert {op for op, _ in rows} == set(dispatch.ops())
    for r in rows.values():
        assert r["auto"] == (r["available"] and (r["default"] or r["opted_in"]))


def test_use_is_a_call_and_a_context_manager():
    with pytest.raises(ValueError, match="backend mode must be one of auto, compiled, reference, got 'fast'"):
        backend.use("fast")
    assert backend.mode() == "auto"
    with backend.use("reference"):
        assert backend.mode() == "reference"
        with backend.use("compiled"):  # the earlier name still works, and nests
            assert backend.mode() == "compiled"
        assert backend.mode() == "reference"
    assert backend.mode() == "auto"
    try:
        backend.use("reference")  # plain call: stays selected
        assert backend.mode() == "reference"
        x = torch.randn(3, 4)
        assert backend.compiled_for("pair_scores", x, torch.randn(3, 2, 4), torch.randn(4)) is None
    finally:
        backend.use("auto")
    with pytest.raises(KeyError):  # the mode comes back even when the block raises
        with backend.use("reference"):
            raise KeyError("x")
    assert backend.mode() == "auto"


@needs_core
def test_table_covers_every_compiled_op_with_a_reference():
    ops = set(backend.compiled_ops())
    assert set(dispatch.ops()) == ops
    assert {op for op, _ in dispatch.KNOWN} == ops, "every op needs a static table entry (dispatch.KNOWN)"
    assert {op for op, d in dispatch.KNOWN if d == "cuda"} == {op for op, d in dispatch.KNOWN if d == "cpu"}
    assert set(backend.references()) == ops, "every compiled op needs a registered torch reference"
    for (op, _dev), k in dispatch.KNOWN.items():
        # a default names the benchmark that measured it faster; an entry that is off says why
        assert ("benchmarks/" in k.evidence and "x" in k.evidence) if k.default else k.evidence.startswith("off:"), op
    for (op, dev), k in dispatch.KNOWN.items():
        if dev == "cuda" and k.default:  # a CUDA default rests on a measurement on a GPU, named in its evidence
            assert f"[{op}-cuda]" in k.evidence and "NVIDIA" in k.evidence, op


def test_measured_evidence_lives_in_the_data_file_the_benchmark_writes(tmp_path, monkeypatch):
    """The CPU rows' evidence is invfast/dispatch_evidence.json's (a default only where its ratio is > 1); the
    benchmark's writer replaces one record with a run's ratio, regime, machine, load and date, keeping notes."""
    import json
    import shutil

    doc = json.loads(open(dispatch.EVIDENCE_FILE, encoding="utf-8").read())["evidence"]
    assert set(doc) <= {f"{op}/{dev}" for op, dev in dispatch.KNOWN}
    for (op, dev), k in dispatch.KNOWN.items():
        rec = doc.get(f"{op}/{dev}")
        if k.default:
            assert rec is not None and min(float(r) for r in rec["ratio"]) > 1, op
        if rec is not None:
            assert k.evidence == dispatch.measured(op, dev) and rec["regime"] in k.evidence and rec["run"] in k.evidence
            assert k.default == (min(float(r) for r in rec["ratio"]) > 1), op
    path = str(tmp_path / "evidence.json")
    shutil.copy(dispatch.EVIDENCE_FILE, path)
    rec = dispatch.record_measurement(path, "augment_views", "cpu", 3.14159, "B=2 test", threads=1)
    after = json.loads(open(path, encoding="utf-8").read())["evidence"]
    assert after["augment_views/cpu"] == rec and rec["ratio"] == ["3.14"] and rec["regime"] == "B=2 test"
    assert "load " in rec["run"] and "1 thread," in rec["run"] and rec["notes"] == doc["augment_views/cpu"]["notes"]
    assert {k: v for k, v in after.items() if k != "augment_views/cpu"} == {
        k: v for k, v in doc.items() if k != "augment_views/cpu"
    }
    monkeypatch.setattr(dispatch, "_EVIDENCE", after)
    assert dispatch.measured("augment_views", "cpu").startswith(
        "benchmarks/bench_ops.py::test_op_vs_reference[augment_views-cpu]: reference/kernel 3.14x (B=2 test; one run"
    )
    after["augment_views/cpu"]["ratio"] = ["0.90"]
    assert dispatch.measured("augment_views", "cpu").startswith("off: measured slower than the reference: ")


def test_every_table_op_has_a_benchmark_factory():
    """benchmarks/bench_ops.py's FACTORIES (read from its source: the benchmarks are not collected here) name
    exactly the ops of the dispatch table, with or without a compiled core."""
    import ast
    import pathlib

    src = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_ops.py"
    tree = ast.parse(src.read_text())
    node = next(
        n.value
        for n in tree.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == "FACTORIES"
    )
    assert isinstance(node, ast.Dict)
    assert {ast.literal_eval(k) for k in node.keys} == {op for op, _ in dispatch.KNOWN}


@needs_core
def test_availability_comes_from_the_loaded_core():
    """cpu: every op has a CPU kernel; cuda: exactly the ops the .cu sources register, and only in a CUDA build."""
    cuda_src = _cuda_impls_in_sources()
    assert {"pair_scores", "hyper_generate", "warp_affine", "augment_views"} <= cuda_src
    assert not any(op.startswith("synth_") for op in cuda_src)
    built_cuda = bool(_loader.load().built_with_cuda())
    for e in dispatch.table():
        if e.device == "cpu":
            assert e.available, e.op
        else:
            assert e.available == (built_cuda and e.op in cuda_src), e.op
    assert not dispatch.entry("pair_scores", "mps").available and not dispatch.entry("pair_scores", "meta").auto


@needs_core
def test_auto_follows_the_table_on_cpu():
    """Each op's CPU entry decides under auto; 'compiled' forces the kernel, 'reference' the torch path."""
    x = torch.zeros(2, 3)
    for op in backend.compiled_ops():
        want = dispatch.entry(op, "cpu").default
        assert (backend.compiled_for(op, x) is not None) == want, op
        with backend.use("compiled"):
            assert backend.compiled_for(op, x) is getattr(torch.ops.invfast, op)
        with backend.use("reference"):
            assert backend.compiled_for(op, x) is None
    assert dispatch.entry("synth_warp", "cpu").default is False  # measured slower: the reference serves
    assert dispatch.entry("pair_scores", "cpu").default is True


def test_forced_kernel_on_a_device_without_one_raises_one_clear_error():
    """'compiled' on a device with no kernel: one RuntimeError naming the op, the device and the way out;
    'auto' runs the torch reference there (a table lookup, no exception involved)."""
    obj = torch.rand(2, 4, 5, 5, device="meta")
    bgs = torch.zeros(3, 3, 5, 5, dtype=torch.uint8, device="meta")
    idx = torch.zeros(2, dtype=torch.int64, device="meta")
    assert backend.compiled_for("synth_composite", obj, bgs, idx) is None
    out = backend.call("synth_composite", obj, bgs, idx)  # the reference on meta tensors: shape only
    assert out.shape == (2, 3, 5, 5) and out.device.type == "meta"
    with backend.use("compiled"):
        with pytest.raises(RuntimeError) as err:
            backend.call("synth_composite", obj, bgs, idx)
    msg = str(err.value)
    assert "'synth_composite'" in msg and "'meta'" in msg and "use('auto')" in msg and "\n" not in msg
    with pytest.raises(RuntimeError, match=r"'synth_color' has no compiled kernel for device 'cuda'"):
        dispatch.use_kernel("synth_color", "cuda", "compiled")  # no CUDA synth kernel in any build
    meta = dict(device="meta")
    with backend.use("compiled"), pytest.raises(RuntimeError, match="'hyper_generate' has no compiled kernel .*'meta'"):
        hyper.generate(torch.zeros(1, 1, 3, **meta), torch.zeros(3, 3, **meta), torch.zeros(3, **meta), [0, 3])


def test_cuda_kernels_env_opts_cuda_entries_in(monkeypatch):
    """INVFAST_CUDA_KERNELS (families or op names, 1/all) opts CUDA entries in for auto; CPU entries and the
    other modes ignore it."""
    monkeypatch.delenv(dispatch.CUDA_KERNELS_ENV, raising=False)
    assert not dispatch.entry("hyper_generate", "cuda").opted_in
    monkeypatch.setenv(dispatch.CUDA_KERNELS_ENV, "augment, hyper_generate")
    assert dispatch.cuda_opt_in() == {"augment", "hyper_generate"}
    assert dispatch.entry("warp_coords", "cuda").opted_in and dispatch.entry("hyper_generate", "cuda").opted_in
    assert not dispatch.entry("hyper_generate_backward", "cuda").opted_in
    assert not dispatch.entry("warp_coords", "cpu").opted_in
    e = dispatch.entry("warp_coords", "cuda")
    assert e.auto == e.available  # opted in: auto takes the kernel exactly where one is built
    assert not dispatch.entry("synth_color", "cuda").auto  # opting in cannot conjure a kernel
    monkeypatch.setenv(dispatch.CUDA_KERNELS_ENV, "1")
    assert dispatch.entry("pair_scores", "cuda").opted_in
    with backend.use("reference"):
        assert not dispatch.use_kernel("pair_scores", "cuda", backend.mode())
    monkeypatch.setenv(dispatch.CUDA_KERNELS_ENV, "0")
    assert not dispatch.entry("warp_coords", "cuda").opted_in and not dispatch.entry("pair_scores", "cuda").opted_in


def test_input_conditions_are_table_rows():
    """The decisions that depend on the inputs are rows' conditions, applied by dispatch.serves: grad inputs take
    the reference in every mode (no backward); integral warps take the exact gather under auto only."""
    assert dispatch.KNOWN[("sqdist_logsumexp", "cpu")].when is dispatch.NO_GRAD
    assert dispatch.KNOWN[("pairwise_logsumexp", "cpu")].when is dispatch.NO_GRAD
    assert dispatch.KNOWN[("warp_affine", "cpu")].when is dispatch.NOT_PIXEL_COPIES
    g, x = torch.randn(3, 4, requires_grad=True), torch.randn(6, 4)
    for mode in ("auto", "compiled"):
        assert not dispatch.serves("sqdist_logsumexp", "cpu", mode, (g, x))
        assert dispatch.serves("sqdist_logsumexp", "cpu", mode, (g.detach(), x))
    flip = torch.tensor([[[-1.0, 0.0, 31.0], [0.0, 1.0, 0.0]]])
    turn = torch.tensor([[[0.8, -0.6, 3.2], [0.6, 0.8, -1.1]]])
    img = torch.zeros(1, 3, 32, 32, dtype=torch.uint8)
    assert not dispatch.serves("warp_affine", "cpu", "auto", (img, flip))
    assert dispatch.serves("warp_affine", "cpu", "compiled", (img, flip))
    assert dispatch.serves("warp_affine", "cpu", "auto", (img, turn))
    assert dispatch.serves("pair_scores", "cpu", "auto", (g, x))  # a row without a condition serves every call
    rows = {e.op: e.when for e in dispatch.table() if e.device == "cpu"}
    assert rows["warp_affine"].startswith("auto:") and "grad" in rows["sqdist_logsumexp"] and rows["pair_scores"] == ""
    # no op wrapper or metric decides on the inputs itself
    import pathlib
    import re

    root = pathlib.Path(dispatch.__file__).parent
    for rel in ("ops/invariance.py", "ops/augment.py", "metrics.py", "transforms/policies.py"):
        text = (root / rel).read_text()
        assert not re.search(r"requires_grad|backend\.mode\(\)", text), rel


@needs_core
def test_kernel_without_backward_keeps_the_reference_for_grad_inputs():
    rows = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(6, 4)
    with backend.use("compiled"):
        out = invariance.sqdist_logsumexp(rows, x, 0, 1.5)
    out.sum().backward()
    assert rows.grad is not None and rows.grad.shape == rows.shape


def test_info_prints_the_table(capsys):
    assert backend_cli.run(argparse.Namespace(json=False, evidence=False)) == 0
    out = capsys.readouterr().out
    assert "dispatch table" in out
    lines = out.splitlines()
    for e in dispatch.table():
        row = [ln for ln in lines if ln.split()[:2] == [e.op, e.device]]
        assert len(row) == 1, (e.op, e.device)
        cols = row[0].split()
        assert cols[3] == ("yes" if e.available else "no") and cols[5 if not e.opted_in else 6] == (
            "kernel" if e.auto else "torch"
        )
    assert backend_cli.run(argparse.Namespace(json=True, evidence=False)) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["op"], r["device"], r["auto"]) for r in data["dispatch"]] == [
        (e.op, e.device, e.auto) for e in dispatch.table()
    ]


def test_import_without_compiled_core_warns_and_falls_back(tmp_path):
    # hide the compiled module: import must still work, warn once with build instructions, and compute;
    # forcing 'compiled' then says how to build
    code = (
        "import sys, importlib.abc, warnings\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'invfast._C': raise ImportError('hidden for test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import invfast, torch\n"
        "    info = invfast.backend_info()\n"  # the core loads on first use (the package root is lazy)
        "msgs = [str(x.message) for x in w]\n"
        "assert any('pip install --no-build-isolation -e .' in m for m in msgs), msgs\n"
        "assert info['cpp'] is False\n"
        "assert not any(r['available'] for r in invfast.backend_info()['dispatch'])\n"
        "st = invfast.FeatureStats.from_features(torch.randn(20, 3))\n"
        "out = invfast.invariance_scores(torch.randn(4, 3), torch.randn(4, 2, 3), st)\n"
        "assert out['distance'].shape == (4, 2)\n"
        "invfast.backend.use('compiled')\n"
        "try:\n"
        "    invfast.invariance_scores(torch.randn(4, 3), torch.randn(4, 2, 3), st)\n"
        "except RuntimeError as e:\n"
        "    assert 'not built' in str(e) and 'pip install' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('compiled mode without a core must raise')\n"
        "print('ok')\n"
    )
    res = _run(code, {})
    assert res.returncode == 0, res.stderr
    assert "ok" in res.stdout


def test_backend_env_var():
    """INVFAST_BACKEND=reference selects the mode (an invalid value: the test below)."""
    res = _run("import invfast; print(invfast.backend.mode())", {"INVFAST_BACKEND": "reference"})
    assert res.returncode == 0 and res.stdout.strip() == "reference", res.stderr


#: each start-up setting: an invalid value, the valid values its message names, what serves instead (an expression)
_SETTINGS = {
    "INVFAST_BACKEND": ("bogus", "auto, compiled, reference", "invfast.backend.mode() == 'auto'"),
    "INVFAST_CPU_ISA": (
        "sse9",
        "baseline, avx2, avx512",
        "(lambda m: m is None or m.cpu_isa() == m.cpu_isa_supported())(invfast._loader.load())",
    ),
}


@pytest.mark.parametrize("var", sorted(_SETTINGS))
def test_an_invalid_setting_warns_once_and_is_a_usage_error(var):
    """An invalid value does not break the import: one warning naming the valid values, the default serves; and
    it is a usage error (exit 2, one line) for every CLI command."""
    bad, valid, fallback = _SETTINGS[var]
    code = (
        "import warnings, torch\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import invfast, invfast._loader\n"
        "    st = invfast.FeatureStats.from_features(torch.randn(20, 3))\n"
        "    for _ in range(2):\n"
        "        invfast.invariance_scores(torch.randn(4, 3), torch.randn(4, 2, 3), st)\n"
        f"    ok = {fallback}\n"
        f"msgs = [str(x.message) for x in w if {var!r} in str(x.message)]\n"
        "print(ok, len(msgs), msgs[0] if msgs else '')\n"
    )
    res = _run(code, {var: bad})
    assert res.returncode == 0, res.stderr
    ok, count, msg = res.stdout.strip().split(" ", 2)
    assert ok == "True" and count == "1"
    assert f"'{bad}'" in msg and valid in msg and "\n" not in msg
    for args in (("info",), ("info", "--json"), ("bench", "--repeat", "1")):
        res = _run("", {var: bad}, *args)
        assert res.returncode == 2, (args, res.stderr)
        assert res.stdout == ""
        err = res.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"invfast {args[0]}: error: {var}='{bad}'"), err
