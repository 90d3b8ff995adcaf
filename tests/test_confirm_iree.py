"""IREE configuration hybrids (the prefill_dedup case): pipeline.plan_hybrids + executable substitution, real iree-compile.

A = prefill_bs8 alone, B = prefill_bs8 in the module with prefill_bs2 (DeduplicateExecutables
leaves prefill_bs2$async_dispatch_0 serving both). The hybrid "dedup, with its shared executable
configured as alone configures it" must compile to alone's kernel. Truth comes from outside the
code under test: the configured dumps grepped with plain regexes, the dumped PTX text, ptxas -v
run here, the hsaco's own notes (parsers.hsaco) and iree-compile's own NOTE/WARNING lines.
"""
import json
import re
import subprocess
from pathlib import Path

import pytest

from rootcause import cli, pipeline, spec as specs, cuda_tools
from rootcause.errors import UsageError
from rootcause.frontends.iree import build as iree
from rootcause.frontends.iree.configs import transplant_configuration

CASE = Path(__file__).resolve().parent.parent / "fixtures" / "cases" / "prefill_dedup"
PREFILL = CASE / "variants.toml"
SHARED, ALONE_EXE = "prefill_bs2$async_dispatch_0", "prefill_bs8$async_dispatch_0"
CONFIG = re.compile(r"lowering_config = (#iree_gpu\.lowering_config<\{.*?\}>)")
TRANSLATION = re.compile(r"translation_info = (#iree_codegen\.translation_info<.*?\}>\}>)")


@pytest.fixture(scope="session")
def pair(tmp_path_factory):
    """Per target: A and B built (frontend build dirs, laid out as bundles), the plan, the hybrids built."""
    cache = {}

    def get(target: str):
        if target not in cache:
            root = tmp_path_factory.mktemp(f"prefill-{target}")
            suffix = "" if target == "cuda" else "_hip"
            a, b = (specs.load(f"{PREFILL}#{v}{suffix}") for v in ("alone", "dedup"))
            dirs = {"a": root / "a", "b": root / "b"}
            built = {s: iree.build(spec, dirs[s]) for s, spec in (("a", a), ("b", b))}
            hybrids, notes = pipeline.plan_hybrids(a, b, built["a"].kernels, built["b"].kernels, bundle_dirs=dirs,
                                          work_dir=root / "hybrids")
            out = {}
            for h in (h for h in hybrids if h.kind == "configuration"):
                out[h.base] = (h, iree.build(h.spec, root / f"h-{h.base}"), root / f"h-{h.base}")
            cache[target] = {"dirs": dirs, "built": built, "hybrids": hybrids, "notes": notes, "h": out}
        return cache[target]
    return get


def only(kernels):
    (k,) = kernels
    return k


def configured(out: Path, exe: str) -> str:
    return (out / "ir" / f"configured_module_{exe}.mlir").read_text()


def ptxas_v(ptx: Path, arch: str = "sm_80") -> tuple[int, str]:
    log = subprocess.run([str(cuda_tools.require_tool("ptxas")), "-v", f"-arch={arch}", str(ptx), "-o", "/dev/null"],
                         capture_output=True, text=True).stderr
    return int(re.search(r"Used (\d+) registers", log).group(1)), re.search(r"\.maxntid ([\d, ]+)", ptx.read_text()).group(1)


@pytest.mark.parametrize("target", ["cuda", "hip"])
def test_plan_transplants_the_other_sides_configuration(pair, target):
    p = pair(target)
    # the configurations first; the whole executables after (their bodies differ in the text)
    assert [h.kind for h in p["hybrids"]] == ["configuration", "configuration", "executable", "executable"]
    assert not any("different sources" in n for n in p["notes"])
    h = p["h"]["b"][0]
    (exe, path), = h.spec.options.substitute_configurations.items()
    assert exe == SHARED  # dedup's one executable, as its dump names it
    assert re.search(r"hal\.executable public @(\S+) \{", configured(p["dirs"]["b"], SHARED)).group(1) == exe
    text, alone, dedup = Path(path).read_text(), configured(p["dirs"]["a"], ALONE_EXE), configured(p["dirs"]["b"], SHARED)
    # alone's configuration, dedup's body: strip the configurations and the rest is dedup's text
    assert CONFIG.findall(text) == CONFIG.findall(alone) != CONFIG.findall(dedup)
    assert TRANSLATION.findall(text) == TRANSLATION.findall(alone)
    strip = lambda t: TRANSLATION.sub("", CONFIG.sub("", t))  # noqa: E731
    assert strip(text) == strip(dedup)
    assert h.source_ops == [s for s in p["built"]["b"].kernels[0].source_ops if s.startswith("prefill_bs8/")]
    assert p["h"]["a"][0].spec.options.substitute_configurations.keys() == {ALONE_EXE}  # the mirror


def test_cuda_hybrid_compiles_to_alones_kernel(pair):
    p = pair("cuda")
    h, out, out_dir = p["h"]["b"]
    k, a, d = only(out.kernels), only(p["built"]["a"].kernels), only(p["built"]["b"].kernels)
    log = (out_dir / "iree-compile.log").read_text()
    assert re.search(rf"NOTE: hal\.executable `{re.escape(SHARED)}` substituted with MLIR source", log)
    ptx = {n: d_ / kk.schedule["binary"] for n, d_, kk in (("h", out_dir, k), ("a", p["dirs"]["a"], a),
                                                            ("d", p["dirs"]["b"], d))}
    # the hybrid's PTX is alone's, but for the symbol names (bs8's executable renamed bs2's)
    assert ptx["h"].read_text() == ptx["a"].read_text().replace("prefill_bs8", "prefill_bs2")
    regs = {n: ptxas_v(f) for n, f in ptx.items()}
    assert regs["h"] == regs["a"] and regs["h"][0] != regs["d"][0]
    assert k.resources["registers"] == regs["h"][0]
    assert k.schedule["workgroup_size"] == [int(x) for x in regs["h"][1].split(",")]
    # the catalog reports what was compiled, and keeps what IREE had configured
    assert k.schedule["lowering_config"] == a.schedule["lowering_config"] != d.schedule["lowering_config"]
    assert CONFIG.findall((out_dir / k.schedule["substituted"]).read_text()) == \
        CONFIG.findall(configured(p["dirs"]["b"], SHARED))
    # still one executable for both functions: the bs8 call site runs it, prefill_bs2 still exists
    assert k.call_sites == ["prefill_bs2", "prefill_bs8"] and k.function.startswith(SHARED)
    flow = next((out_dir / "ir" / "phases").glob("*.flow.mlir")).read_text()
    for fn in ("prefill_bs2", "prefill_bs8"):
        body = re.search(rf"util\.func public @{fn}\$async\(.*?\n  \}}\n", flow, re.S).group()
        assert f"flow.dispatch @{SHARED}::" in body


def test_cuda_mirror_compiles_to_dedups_kernel(pair):
    p = pair("cuda")
    h, out, out_dir = p["h"]["a"]
    k, d = only(out.kernels), only(p["built"]["b"].kernels)
    mine = (out_dir / k.schedule["binary"]).read_text()
    assert mine == (p["dirs"]["b"] / d.schedule["binary"]).read_text().replace("prefill_bs2", "prefill_bs8")
    assert k.call_sites == ["prefill_bs8"] and k.resources["registers"] == d.resources["registers"]


def test_hip_hybrid_has_alones_resources(pair):
    from parsers import hsaco

    p = pair("hip")
    _, _, out_dir = p["h"]["b"]
    rows = {}
    for n, d_ in (("h", out_dir), ("a", p["dirs"]["a"]), ("d", p["dirs"]["b"])):
        (f,) = (d_ / "binaries").glob("*.hsaco")
        (r,) = hsaco.kernels(f.read_bytes(), f.name)
        rows[n] = (r.registers, r.shared_bytes, r.extra.get("sgpr_count"), r.spills)
    assert rows["h"] == rows["a"] != rows["d"]


def test_substituting_a_whole_dump_renames_it(tmp_path):
    """The spec option on its own: alone's configured dump, as dumped, in place of dedup's executable."""
    alone = tmp_path / "alone"
    iree.build(specs.load(f"{PREFILL}#alone"), alone)
    (tmp_path / "alone.mlir").write_text(configured(alone, ALONE_EXE))
    toml = tmp_path / "s.toml"
    toml.write_text(f'name = "s"\nallow_outside_paths = true\nfrontend = "iree"\nsource = "{CASE / "prefill_2_8.mlir"}"\ntarget = "cuda:sm_80"\n'
                    f'entry = "prefill_bs8"\n[iree]\ninput_type = "torch"\n'
                    f'substitute_configurations = {{ "{SHARED}" = "alone.mlir" }}\n')
    out = iree.build(specs.load(toml), tmp_path / "h")
    k = only(out.kernels)
    ptx = (tmp_path / "h" / k.schedule["binary"]).read_text()
    assert ptx == (alone / "binaries" / f"module_{ALONE_EXE}_cuda_nvptx_fb.ptx").read_text().replace(
        "prefill_bs8", "prefill_bs2")
    sub = (tmp_path / "h" / "ir" / "substitutions" / f"{SHARED}.mlir").read_text()
    assert f"@{SHARED}_matmul" in sub and "prefill_bs8" not in sub

    toml.write_text(toml.read_text().replace(f'"{SHARED}"', '"nope$dispatch_7"'))
    with pytest.raises(UsageError) as err:
        iree.build(specs.load(toml), tmp_path / "bad")
    msg = str(err.value)
    assert "\n" not in msg and "s.toml: [iree].substitute_configurations.nope$dispatch_7: unknown executable" in msg
    assert msg.endswith(f"the build's executables: {SHARED}")


@pytest.mark.parametrize("value, needle", [
    ('{ "x" = "missing.mlir" }', "substitute_configurations.x: file not found"),
    ('{ "x" = "s.toml" }', "must be a .mlir or .mlirbc"),
    ('"file.mlir"', "must be a table executable = 'configured.mlir'"),
    ('{ "x" = 3 }', "must be a table executable = 'configured.mlir'"),
])
def test_spec_checks_substitutions(tmp_path, value, needle):
    toml = tmp_path / "s.toml"
    toml.write_text(f'name = "s"\nallow_outside_paths = true\nfrontend = "iree"\nsource = "{CASE / "prefill_8.mlir"}"\ntarget = "cuda:sm_80"\n'
                    f'entry = "prefill_bs8"\n[iree]\nsubstitute_configurations = {value}\n')
    with pytest.raises(UsageError, match=re.escape(needle)):
        specs.load(toml)


def test_transplant_refuses_different_ops():
    base = '%x = linalg.generic {lowering_config = #a<{workgroup = [1]}>}\n'
    other = '%x = linalg.matmul {lowering_config = #a<{workgroup = [2]}>}\n'
    with pytest.raises(UsageError, match="not the same configured ops"):
        transplant_configuration(base, other, "b.mlir", "o.mlir")
    assert transplant_configuration(base, base.replace("[1]", "[2]"), "b", "o") == base.replace("[1]", "[2]")


def test_analyze_bundle_only_writes_the_hybrids(tmp_path, capsys):
    """The CLI path: A, B and both configuration hybrids as bundles, the next commands printed."""
    toml = tmp_path / "v.toml"
    # the case itself, with inputs cut down: bundles regenerate the 1.25 GiB input otherwise
    text = PREFILL.read_text().replace('"prefill_8.mlir"', f'"{CASE / "prefill_8.mlir"}"').replace(
        '"prefill_2_8.mlir"', f'"{CASE / "prefill_2_8.mlir"}"').replace("[8, 2048, 5120]", "[8, 32, 5120]")
    toml.write_text(text.replace("[5120, 131072]", "[8, 8]").replace("[base]\n", "[base]\nallow_outside_paths = true\n", 1))
    out = tmp_path / "o"
    assert cli.main(["analyze", f"{toml}#alone", f"{toml}#dedup", "--bundle-only", "--target", "cuda:sm_80",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    names = sorted(p.name for p in (out / "bundles").iterdir())
    assert names == ["prefill_bs8-alone-cuda", "prefill_bs8-alone-cuda_h1-configuration",
                     "prefill_bs8-alone-cuda_h3-executable", "prefill_bs8-dedup-cuda",
                     "prefill_bs8-dedup-cuda_h2-configuration", "prefill_bs8-dedup-cuda_h4-executable"]
    assert all(str(out / "bundles" / n) in printed for n in names)

    def ptx(name):
        return next((out / "bundles" / name / "binaries").glob("*.ptx")).read_text()

    alone = ptx("prefill_bs8-alone-cuda")
    assert ptx("prefill_bs8-dedup-cuda_h2-configuration") == alone.replace("prefill_bs8", "prefill_bs2")
    # here a configuration fits either body: the whole executable compiles to the same kernel,
    # yet its .vmfb differs (it names its own build folder), so both are kept and measured
    assert ptx("prefill_bs8-dedup-cuda_h4-executable") == ptx("prefill_bs8-dedup-cuda_h2-configuration")
    notes = json.loads((out / "plan.json").read_text())["notes"]
    assert not any("compiles to the same kernels" in n for n in notes)
