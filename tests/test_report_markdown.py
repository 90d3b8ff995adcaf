"""The Markdown triage comment, parsed by a real CommonMark/GFM parser (markdown-it-py with its
table rule), and the `rootcause report` command's handling of bad input. Numbers are checked
against the H200 CUPTI capture's own records."""
import copy
import json
import subprocess
import sys

import pytest
from markdown_it import MarkdownIt

from rootcause.report import render_markdown
from rootcause.report.markdown import GITHUB_LIMIT, TOP_UNITS

from captures import CAPTURE, ROOT, call_interval, compare_shared, many_units, ncu_rows, raw_calls
MD = MarkdownIt("commonmark").enable("table")


@pytest.fixture(scope="module")
def att_path(tmp_path_factory):
    return compare_shared(tmp_path_factory.mktemp("att"), "--gpu", "H200")


@pytest.fixture(scope="module")
def attribution(att_path):
    return json.loads(att_path.read_text())


def tables(text: str) -> list[list[list[str]]]:
    """Each GFM table as rows of cell texts (inline content rendered to plain text)."""
    out, rows, row = [], None, None
    for tok in MD.parse(text):
        if tok.type == "table_open":
            rows = []
        elif tok.type == "table_close":
            out.append(rows)
            rows = None
        elif tok.type == "tr_open":
            row = []
        elif tok.type == "tr_close":
            rows.append(row)
        elif tok.type == "inline" and rows is not None:
            row.append("".join(c.content for c in tok.children if c.type in ("text", "code_inline")))
    return out


def _ratio(calls_on, calls_off):
    return call_interval(calls_on) / call_interval(calls_off)


def test_verdict_line_and_tables(attribution):
    off, on = raw_calls()
    text = render_markdown(attribution)
    first = text.splitlines()[0]
    assert first.startswith("**rootcause:** ON is ") and f"{_ratio(on, off):.2f}x slower than OFF" in first
    assert "[" in first and "]" in first  # the delta's interval
    found = tables(text)
    assert len(found) == 4  # top units, top resources, all units, all resources
    for t in found:
        assert len({len(r) for r in t}) == 1, "every row has the header's cell count"
    top = found[0]
    assert len(top) - 1 == min(len(attribution["units"]), TOP_UNITS) + 1  # + residual row
    assert top[1][0] == str(attribution["units"][0]["unit"])
    # resource table: the fused kernel's registers and grid, from the capture's records
    fused = next(r for r in on[0] if r["name"] == "fused_pool2d_add2_kernel")
    row = next(r for r in found[1] if r[2].startswith("fused_pool2d_add2_kernel"))
    head = found[1][0]
    assert row[head.index("registers")] == str(fused["registers_per_thread"])
    assert row[head.index("grid")] == f"{fused['grid_x']:,}"


def test_footer_and_details(attribution):
    text = render_markdown(attribution)
    assert text.count("<details>") == 3 == text.count("</details>")  # all units, all kernels, how to read this
    assert "<summary>How to read this</summary>" in text
    tokens = MD.parse(text)
    assert [t.type for t in tokens].count("table_open") == 4  # tables inside <details> parse as tables
    assert "rootcause 0.1.0" in text.split("---")[-1] and "cupti" in text.split("---")[-1]


NASTY = "a|b`c <d> *e* _f_ [g](h) \\i"


def test_markdown_active_characters_in_names(attribution):
    doc = copy.deepcopy(attribution)
    for u in doc["units"]:
        u["kernels_b"] = [NASTY if k == "fused_pool2d_add2_kernel" else k for k in u["kernels_b"]]
    doc["variants"]["b"]["label"] = "B|*x*"
    text = render_markdown(doc)
    found = tables(text)
    for t in found:
        assert len({len(r) for r in t}) == 1
    cells = [c for t in found for r in t for c in r]
    assert any(NASTY in c for c in cells)  # one cell holds the whole name, as text
    assert "B|*x*" in found[0][0][2]
    html = MD.render(text)
    assert "<d>" not in html and "<em>e</em>" not in html and 'href="h"' not in html


def test_fits_a_github_comment(attribution):
    text = render_markdown(many_units(attribution, 10_000))
    assert len(text) < GITHUB_LIMIT
    assert "more units not shown" in text and "more kernel rows not shown" in text
    for t in tables(text):
        assert len({len(r) for r in t}) == 1
    assert text.rstrip().endswith("</sub>")  # the footer survives the cut


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "rootcause", "report", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def test_cli_formats(att_path, tmp_path):
    for fmt, name in (("html", "r.html"), ("markdown", "r.md"), ("json", "r.json")):
        r = _cli(att_path, "--format", fmt, "--out", tmp_path / name)
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert tables((tmp_path / "r.md").read_text())
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(att_path.read_text())


@pytest.mark.parametrize("mutate, key", [
    (lambda d: d.update(schema_version=99), "schema_version"),
    (lambda d: d.pop("units"), "units"),
    (lambda d: d["units"][0].pop("delta_ns"), "units[0].delta_ns"),
    (lambda d: d["whole_graph"]["a"].update(median="fast"), "whole_graph.a.median"),
    (lambda d: d["variants"].pop("b"), "variants.b"),
    (lambda d: d.update(kernels={"a": 1}), "kernels"),
    (lambda d: d.update(device=132), "device"),
])
def test_cli_bad_schema_one_line(att_path, tmp_path, mutate, key):
    doc = json.loads(att_path.read_text())
    mutate(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = _cli(bad, "--format", "markdown")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and f"'{key}'" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_cli_not_json(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"schema_version": 1, "units": [')
    r = _cli(bad)
    assert r.returncode == 2 and str(bad) in r.stderr and "line 1" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = _cli(tmp_path / "absent.json")
    assert r.returncode == 2 and "no such attribution file" in r.stderr
    r = _cli(bad.with_name("x.json"), "--device", "Z9000")  # the old name still works, with a warning
    assert r.returncode == 2 and "--device is now --gpu" in r.stderr


RUN = ROOT / "fixtures/captures/h200-2026-12-02-run"


def test_environment_from_the_run_directory(tmp_path):
    """compare on `rootcause run`'s output: the footer carries the GPU, driver and clocks that
    env.json (written beside the profiles) recorded, and the measured verdict."""
    r = subprocess.run([sys.executable, "-m", "rootcause", "compare", RUN / "pool_fusion_off.cupti.json",
                        RUN / "pool_fusion_on.cupti.json", "--measurement", RUN / "measurement.json",
                        "--label-a", "pool_fusion_off", "--label-b", "pool_fusion_on", "--out", tmp_path],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    text = render_markdown(json.loads((tmp_path / "attribution.json").read_text()))
    env = json.loads((RUN / "env.json").read_text())
    footer = text.split("\n---\n")[-1]
    gpu = env["before"]["gpus"][0]
    assert gpu["name"] in footer and env["before"]["driver"] in footer
    for snap in ("before", "measure_start", "after"):
        assert f"{env[snap]['gpus'][0]['sm_clock_mhz']} MHz" in footer
    m = json.loads((RUN / "measurement.json").read_text())["measurement"]["variants"]
    on, off = m["pool_fusion_on"]["median_s"], m["pool_fusion_off"]["median_s"]
    assert f"pool\\_fusion\\_on is {off / on:.2f}x faster than pool\\_fusion\\_off" in text.splitlines()[0]
    assert "(measured, B - A)" in text.splitlines()[0]


@pytest.mark.parametrize("entry", ["einsum_cpu_local_task", "pool_fusion_h200_ncu"])
def test_gallery_entry_regenerates(tmp_path, entry):
    """`python tools/gallery.py` rebuilds a committed entry with the same verdict."""
    r = subprocess.run([sys.executable, "tools/gallery.py", "--only", entry,
                        "--out", tmp_path], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    fresh = (tmp_path / entry / "report.md").read_text().splitlines()
    committed = (ROOT / "gallery" / entry / "report.md").read_text().splitlines()
    assert fresh[:3] == committed[:3]
    assert (tmp_path / entry / "report.html").stat().st_size > 4_000_000


def test_gallery_ncu_entry_against_the_csv():
    """The committed ncu report: one call per variant; the launches of one kernel name may sit in
    several units (the i-th add2_kernel with the pool, the other alone), so per name the units'
    per-launch rows add up to that name's rows in the raw CSVs, each unit's time is the sum of its
    rows, and the Markdown's top-unit row shows that sum."""
    doc = json.loads((ROOT / "gallery/pool_fusion_h200_ncu/attribution.json").read_text())
    rows = {"a": ncu_rows("pool_fusion_off"), "b": ncu_rows("pool_fusion_on")}
    assert doc["variants"]["a"]["calls"] == doc["variants"]["b"]["calls"] == 1
    for v in "ab":
        mine = [k for k in doc["kernels"] if k["variant"] == v]
        for name in {k for k, _ in rows[v]}:
            assert sum(k["time_per_call_ns"] for k in mine if k["kernel"] == name) == pytest.approx(
                sum(d for k, d in rows[v] if k == name))
        for u in doc["units"]:
            assert u[f"time_{v}_ns"]["median"] == pytest.approx(
                sum(k["time_per_call_ns"] for k in mine if k["unit"] == u["unit"]))
    top = tables((ROOT / "gallery/pool_fusion_h200_ncu/report.md").read_text())[0][1]
    assert top[4].startswith(f"{doc['units'][0]['time_b_ns']['median'] / 1e3:.1f} us")


def test_no_difference_is_said_plainly(tmp_path):
    """A variant against itself (the same 20 ON calls): nothing significant, no ratio claimed."""
    r = subprocess.run([sys.executable, "-m", "rootcause", "compare", f"{CAPTURE}#0", f"{CAPTURE}#0",
                        "--label-a", "ON-1", "--label-b", "ON-2", "--out", tmp_path],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "attribution.json").read_text())
    first = render_markdown(doc).splitlines()[0]
    assert "No significant whole-graph difference between ON-2 and ON-1" in first
    assert "closure not available" in first and "slower" not in first


def test_non_finite_numbers_rejected(att_path, tmp_path):
    text = att_path.read_text()
    doc = json.loads(text)
    doc["residual"]["delta_ns"]["median"] = float("nan")
    bad = tmp_path / "nan.json"
    bad.write_text(json.dumps(doc))  # Python writes NaN, which json.loads reads back
    r = _cli(bad, "--format", "html")
    assert r.returncode == 2 and "'residual.delta_ns.median'" in r.stderr and "finite" in r.stderr


@pytest.mark.parametrize("brk", ["\r", "\r\n", "\u2028", "\x0b"])
def test_line_breaks_in_names_keep_rows_whole(attribution, brk):
    """A kernel name holding a line break (\\r reached the tables once) stays in one row: every
    table line of the comment starts and ends with a pipe under str.splitlines()'s own breaks."""
    doc = copy.deepcopy(attribution)
    name = f"evil{brk}| --- |{brk}kernel"
    for u in doc["units"]:
        u["kernels_b"] = [name if k == "fused_pool2d_add2_kernel" else k for k in u["kernels_b"]]
    text = render_markdown(doc)
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert rows and all(line.rstrip().endswith("|") for line in rows)
    found = tables(text)
    assert any("evil" in c and "kernel" in c for t in found for r in t for c in r)
    for t in found:
        assert len({len(r) for r in t}) == 1


def test_a_delta_under_the_practical_threshold_says_so(attribution):
    """The TVM cross-version pair's figures (fixtures/captures/h200-2026-12-03-versions: 53.0 vs
    52.8 us, delta -214 ns [-251, -196]): the interval excludes 0, yet lies within the 1%
    threshold, and the verdict says that is why it is not significant; an interval that holds 0
    within the threshold reads the same."""
    from rootcause.report.view import verdict, verdict_sentence

    doc = copy.deepcopy(attribution)
    w = doc["whole_graph"]
    w["a"].update(median=53_014.0, low=52_990.0, high=53_040.0)
    w["b"].update(median=52_800.0, low=52_770.0, high=52_830.0)
    w["delta_ns"].update(median=-214.0, low=-251.0, high=-196.0)
    w["significant"] = False
    doc["significance"]["whole_min_effect_ns"] = 530.14
    line = verdict_sentence(verdict(doc))
    assert line.startswith("No significant whole-graph difference")
    assert "its interval lies within the practical threshold of 530 ns either way" in line
    # a document written before the whole graph had its own threshold: the one threshold
    del doc["significance"]["whole_min_effect_ns"]
    doc["significance"]["min_effect_ns"] = 530.14
    assert "practical threshold of 530 ns" in verdict_sentence(verdict(doc))
    w["delta_ns"].update(low=-251.0, high=12.0)  # holds 0, within the threshold: the same words
    assert "within the practical threshold of 530 ns" in verdict_sentence(verdict(doc))
    w["delta_ns"].update(high=600.0)  # reaches past it (a document from before the rule): no such words
    assert "threshold" not in verdict_sentence(verdict(doc))


def test_readme_reading_guide_is_the_reports():
    """The README's 'Reading a report' lists the guide every report closes with, word for word."""
    from rootcause.report import view

    readme = (ROOT / "README.md").read_text()
    for term, what in view.READING_GUIDE:
        assert f"- **{term}**: {what}" in readme


def test_a_unit_whose_kernels_compute_several_modules_says_how_many_more():
    # The gallery's llama pair (fixtures/models/llama): k and v are Linear(DIM, KV_HEADS * HEAD) of
    # one shape, so IREE builds one matmul executable for both, launched for every layer; the unit
    # of that executable is attn.k's, with attn.v beside it.
    doc = json.loads((ROOT / "gallery/llama_iree_hfuse_h200_analyze/attribution.json").read_text())
    (unit,) = [u for u in doc["units"] if u["module_paths"][0] == "layers.*.attn.k"]
    assert unit["module_paths"] == ["layers.*.attn.k", "layers.*.attn.v"]
    cells = {row[0] for table in tables(render_markdown(doc)) for row in table}
    assert f"{unit['unit']} layers.*.attn.k x8 +1 module" in cells
    several = [u for u in doc["units"] if len(u["module_paths"]) > 2]
    assert several
    for u in several:
        assert f"{u['unit']} {u['module_paths'][0]} x8 +{len(u['module_paths']) - 1} modules" in cells
