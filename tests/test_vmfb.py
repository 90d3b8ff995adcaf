"""parsers.vmfb on vmfbs compiled now by iree-compile for CUDA, HIP and llvm-cpu.

Sources of truth: the binaries iree-compile itself dumps (--iree-hal-dump-executable-
binaries-to), their entry points as other tools see them (PTX `.entry` lines and `.maxntid`,
llvm-readobj's AMDGPU notes, binutils readelf's .debug_pubnames) and iree-dump-module's
listing of the module's rodata segments.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from parsers import ParseError, vmfb
from mutation import byte_writes, written

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures" / "binaries"
VENV_BIN = ROOT / ".venv" / "bin"
TARGETS = {
    "cuda": (["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"], "cuda-nvptx-fb", "ptx", "*.ptx"),
    "hip": (["--iree-hal-target-device=hip", "--iree-rocm-target=gfx942"], "rocm-hsaco-fb", "hsaco", "*.hsaco"),
    "cpu": (["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=generic"], "embedded-elf-x86_64", "elf", "*.so"),
}


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """target -> (vmfb, dumped binary), each compiled once from fixtures/binaries/iree/mm.mlir."""
    out = tmp_path_factory.mktemp("vmfb")
    result = {}
    for name, (flags, _, _, pattern) in TARGETS.items():
        dump = out / f"{name}_dump"
        module = out / f"{name}.vmfb"
        subprocess.run([str(VENV_BIN / "iree-compile"), str(FIX / "iree" / "mm.mlir"), *flags,
                        f"--iree-hal-dump-executable-binaries-to={dump}", "-o", str(module)],
                       check=True, capture_output=True)
        (binary,) = dump.glob(pattern)
        result[name] = (module, binary)
    return result


def entry_points(kind: str, binary: Path) -> list[str]:
    if kind == "ptx":
        return re.findall(r"^\.visible \.entry (\S+?)\(", binary.read_text(), re.M)
    if kind == "hsaco":
        out = subprocess.run([shutil.which("llvm-readobj") or "llvm-readobj", "--notes", str(binary)],
                             capture_output=True, text=True, check=True).stdout
        return re.findall(r"^    \.name:\s+(\S+)$", out, re.M)
    out = subprocess.run(["readelf", "--debug-dump=pubnames", str(binary)], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"^\s+\d+\s+(\S+)$", out, re.M)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_blob_and_exports_match_dump(built, target):
    module, binary = built[target]
    _, fmt, kind, _ = TARGETS[target]
    data = module.read_bytes()
    assert vmfb.matches(data)
    (exe,) = vmfb.executables(data, str(module))
    assert (exe.format, exe.blob_kind) == (fmt, kind)
    assert exe.blob == binary.read_bytes()  # byte for byte what iree-compile dumped
    assert exe.name == "mm_linked_" + fmt.replace("-", "_")
    truth = entry_points(kind, binary)
    assert len(truth) == 2 and exe.exports == truth


def test_cuda_block_matches_ptx_maxntid(built):
    module, binary = built["cuda"]
    (exe,) = vmfb.executables(module.read_bytes(), str(module))
    ptx = binary.read_text()
    for name in exe.exports:
        body = ptx.split(f".entry {name}(", 1)[1]
        maxntid = [int(v) for v in re.search(r"\.maxntid (\d+), (\d+), (\d+)", body).groups()]
        assert exe.launch[name]["block"] == maxntid


def test_segments_match_iree_dump_module(built):
    module, _ = built["hip"]
    listing = subprocess.run([str(VENV_BIN / "iree-dump-module"), str(module)], capture_output=True, text=True,
                             check=True).stdout
    rows = re.findall(r"\.rodata\[\s*(\d+)\] (embedded|external)\s+(\d+) bytes(?: \(offset (\d+))?", listing)
    segments = vmfb.segments(module.read_bytes(), str(module))
    assert len(rows) == len(segments) > 0
    externals = [(at, blob) for (_, where, _, _), (at, blob) in zip(rows, segments) if where == "external"]
    for (index, where, size, offset), (at, blob) in zip(rows, segments):
        assert len(blob) == int(size), index
    # External offsets are relative to one base (end of FlatBuffer, 64-byte aligned).
    ext_rows = [r for r in rows if r[1] == "external"]
    bases = {at - int(r[3]) for r, (at, _) in zip(ext_rows, externals)}
    assert len(bases) == 1 and bases.pop() % 64 == 0


def test_bare_flatbuffer_without_zip():
    zipped = vmfb.executables((FIX / "iree" / "mm_hip_gfx942.vmfb").read_bytes(), "zip")
    bare_data = (FIX / "iree" / "mm_hip_gfx942_nozip.vmfb").read_bytes()
    assert bare_data[:4] != b"PK\x03\x04" and vmfb.matches(bare_data)
    bare = vmfb.executables(bare_data, "bare")
    assert [e.blob for e in bare] == [e.blob for e in zipped]
    assert [e.exports for e in bare] == [e.exports for e in zipped]


def test_fixtures_still_parse():
    for path in sorted((FIX / "iree").glob("*.vmfb")):
        exes = vmfb.executables(path.read_bytes(), str(path))
        assert len(exes) == 1 and len(exes[0].exports) == 2, path


def test_bad_input_is_one_line():
    with pytest.raises(ParseError, match="not an IREE vmfb"):
        vmfb.executables(b"\0" * 64, "zeros.vmfb")
    data = (FIX / "iree" / "mm_cuda_sm80.vmfb").read_bytes()
    with pytest.raises(ParseError, match="runs past the end") as err:
        vmfb.executables(data[: len(data) // 2], "half.vmfb")
    assert "half.vmfb" in str(err.value) and "\n" not in str(err.value)


REAL = (FIX / "iree" / "mm_cuda_sm80.vmfb").read_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(byte_writes(len(REAL)), st.integers(0, len(REAL)))
def test_mutated_input_raises_only_parse_error(writes, cut):
    data = written(REAL, writes, cut, keep=16)
    try:
        vmfb.executables(data, "mutated.vmfb")
    except ParseError as err:
        assert "\n" not in str(err)
