"""parsers.ptx on PTX that nvcc 13.5 writes and on hand-written PTX, checked against what
ptxas makes of the same text (cuobjdump -elf attributes, ptxas -v)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from parsers import ParseError, cubin, ptx
from test_cubin_helpers import (BOUNDS_PTX, FIXTURES, _WORK, _run, need, nvinfo_values, ptxas_info,
                                resource_usage)
from mutation import mutate


def _assemble(text_path, arch="sm_90"):
    out = _WORK / f"{text_path.stem}-asm-{arch}.cubin"
    proc = _run([need("ptxas"), f"-arch={arch}", "-v", "-o", out, text_path])
    return out, proc.stderr + proc.stdout


@pytest.fixture(scope="module")
def nvcc_ptx():
    from test_cubin_helpers import nvcc
    path, _ = nvcc("ptx", "-arch=sm_90")
    return path


def test_nvcc_ptx_against_ptxas(nvcc_ptx):
    rows = {r.name: r for r in ptx.kernels(nvcc_ptx.read_bytes(), str(nvcc_ptx))}
    obj, log = _assemble(nvcc_ptx)
    usage = resource_usage(obj)
    assert set(rows) == set(usage)  # every .entry, no .func
    sizes = nvinfo_values(obj, "EIATTR_CBANK_PARAM_SIZE")
    bounds = nvinfo_values(obj, "EIATTR_MAX_THREADS")
    info = ptxas_info(log)
    for name, r in rows.items():
        assert r.format == "ptx" and r.registers is None and r.arch == "sm_90"
        assert r.param_bytes == int(sizes[name], 16), name  # layout with alignment padding
        if name in bounds:
            x, y, z = (int(v, 16) for v in bounds[name].split())
            assert r.max_threads_per_block == x * y * z
        else:
            assert r.max_threads_per_block is None
        # declared bytes; ptxas may pad the total up to the module's .extern .shared alignment (16)
        declared = r.extra["ptx_shared_bytes"]
        assert declared <= info[name]["smem"] <= -(-declared // 16) * 16, name
    assert rows["dyn_shared"].extra["dynamic_shared"] is True
    assert rows["local_array"].extra["ptx_local_bytes"] >= info["local_array"]["stack_frame"] > 0
    # the cubin reader sees the same parameter bytes (two readers, one ptxas truth)
    for r in cubin.kernels(obj.read_bytes()):
        assert r.param_bytes == rows[r.name].param_bytes


def test_hand_written_directives_and_comments():
    rows = {r.name: r for r in ptx.kernels(BOUNDS_PTX.read_text(), str(BOUNDS_PTX))}
    assert set(rows) == {"reqntid_kernel", "maxnreg_kernel"}  # not the commented-out entry, not .func
    obj, log = _assemble(BOUNDS_PTX)
    assert set(resource_usage(obj)) == set(rows)
    info = ptxas_info(log)
    req = rows["reqntid_kernel"]
    block = tuple(int(v, 16) for v in nvinfo_values(obj, "EIATTR_REQNTID")["reqntid_kernel"].split())
    assert req.block == block and req.max_threads_per_block == block[0] * block[1] * block[2]
    assert req.extra["minnctapersm"] == 4
    assert req.param_bytes == int(nvinfo_values(obj, "EIATTR_CBANK_PARAM_SIZE")["reqntid_kernel"], 16)
    # module-scope module_buf[512] is named in the body, plus the entry's own local_tile[96]
    assert req.extra["ptx_shared_bytes"] == info["reqntid_kernel"]["smem"]
    mx = rows["maxnreg_kernel"]
    assert mx.extra["maxnreg"] == int(nvinfo_values(obj, "EIATTR_MAXREG_COUNT")["maxnreg_kernel"], 16)
    assert mx.extra["linkage"] == "weak" and mx.max_threads_per_block == 256
    assert mx.extra["ptx_shared_bytes"] == 0 and {r.arch for r in rows.values()} == {"sm_80"}


def test_committed_fixture_and_bytes_or_str():
    path = FIXTURES / "kernels_sm90.ptx"
    as_bytes = ptx.kernels(path.read_bytes(), str(path))
    as_str = ptx.kernels(path.read_text(), str(path))
    assert [r.to_dict() for r in as_bytes] == [r.to_dict() for r in as_str]
    assert len(as_bytes) == path.read_text().count(".entry ")


def test_param_layout_alignment():
    total, layout = ptx.param_layout(".param .u8 a, .param .align 16 .b8 q[16], .param .u64 .ptr .align 1 p")
    assert total == 40 and [o for _, o, _ in layout] == [0, 16, 32]


@pytest.mark.parametrize("text,what", [
    (b"\xff\xfe not text", "not UTF-8"),
    ("hello world", "no .version / .target"),
    (".version 8.0\n.target sm_80\n.visible .entry k(\n.param .u64 p\n)\n{\n ret;\n", "line 3: body of k is not closed"),
    (".version 8.0\n.target sm_80\n.visible .entry k(.param .q64 p)\n{ ret; }\n", "declaration without a type"),
    (".version 8.0\n.target sm_80\n.visible .entry k()\n.maxntid 12x\n{ ret; }\n", r"line 3: .maxntid: expected a number, got '12x'"),
])
def test_bad_ptx(text, what):
    with pytest.raises(ParseError, match=what) as err:
        ptx.kernels(text, "bad.ptx")
    assert str(err.value).startswith("bad.ptx: ")


_SEED = BOUNDS_PTX.read_bytes()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_ptx_raises_only_parse_error(data):
    blob = bytearray(_SEED)
    how = data.draw(st.sampled_from(["flip", "truncate", "overwrite", "delete"]))
    if how in ("flip", "truncate"):
        blob = mutate(data, blob, how, max_flips=8)
    elif how == "delete":
        start = data.draw(st.integers(0, len(blob) - 1))
        del blob[start:start + data.draw(st.integers(1, 40))]
    else:
        start = data.draw(st.integers(0, len(blob) - 1))
        chunk = data.draw(st.sampled_from([b"{", b"}", b"[", b"]", b"(", b")", b".shared .b8 x[", b"/*",
                                           b".entry e(", b",", b".align", b"\0"]))
        blob[start:start] = chunk
    try:
        rows = ptx.kernels(bytes(blob), "m.ptx")
    except ParseError as exc:
        assert str(exc).startswith("m.ptx: ") and "\n" not in str(exc)
    else:
        assert all(r.format == "ptx" for r in rows)
