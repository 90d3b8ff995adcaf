"""AMDGPU code objects (hsaco), code object v3/v4/v5/v6.

Per-kernel resources come from the NT_AMDGPU_METADATA note (owner 'AMDGPU', type 32, a
msgpack map whose 'amdhsa.kernels' lists every kernel). Each kernel's 64-byte kernel
descriptor (`<name>.kd` in .rodata) is what the hardware actually loads, so its LDS, scratch
and kernarg sizes and the granulated register counts of COMPUTE_PGM_RSRC1 are cross-checked
against the note; disagreements land in extra['kd_mismatch'].

Reference: LLVM AMDGPUUsage ("Code Object V3+ Metadata", "Kernel Descriptor", "ELF Header").
"""
from __future__ import annotations

import struct
from typing import Any

import msgpack

from parsers.base import KernelRecord, ParseError
from parsers.host_elf import ELF_MAGIC, guarded, open_elf, symbol_contents, symbols

EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
# Code object v2 notes (owner 'AMD'): NT_AMD_HSA_CODE_OBJECT_VERSION .. NT_AMD_HSA_ISA_NAME.
V2_NOTE_TYPES = {1, 2, 3, 4, 5, 6, 10, 11}
# e_ident[EI_ABIVERSION] for ELFOSABI_AMDGPU_HSA: 0 = v2, 1 = v3, 2 = v4, 3 = v5, 4 = v6.
CODE_OBJECT_VERSIONS = {0: 2, 1: 3, 2: 4, 3: 5, 4: 6}

# EF_AMDGPU_MACH (e_flags & 0xff) -> processor, from LLVM's ELF.h.
MACH = {
    0x020: "gfx600", 0x021: "gfx601", 0x022: "gfx700", 0x023: "gfx701", 0x024: "gfx702",
    0x025: "gfx703", 0x026: "gfx704", 0x028: "gfx801", 0x029: "gfx802", 0x02a: "gfx803",
    0x02b: "gfx810", 0x02c: "gfx900", 0x02d: "gfx902", 0x02e: "gfx904", 0x02f: "gfx906",
    0x030: "gfx908", 0x031: "gfx909", 0x032: "gfx90c", 0x033: "gfx1010", 0x034: "gfx1011",
    0x035: "gfx1012", 0x036: "gfx1030", 0x037: "gfx1031", 0x038: "gfx1032", 0x039: "gfx1033",
    0x03a: "gfx602", 0x03b: "gfx705", 0x03c: "gfx805", 0x03d: "gfx1035", 0x03e: "gfx1034",
    0x03f: "gfx90a", 0x040: "gfx940", 0x041: "gfx1100", 0x042: "gfx1013", 0x043: "gfx1150",
    0x044: "gfx1103", 0x045: "gfx1036", 0x046: "gfx1101", 0x047: "gfx1102", 0x048: "gfx1200",
    0x049: "gfx1250", 0x04a: "gfx1151", 0x04b: "gfx941", 0x04c: "gfx942", 0x04e: "gfx1201",
    0x04f: "gfx950", 0x051: "gfx9-generic", 0x052: "gfx10-1-generic", 0x053: "gfx10-3-generic",
    0x054: "gfx11-generic", 0x055: "gfx1152", 0x058: "gfx1153", 0x059: "gfx12-generic",
    0x05f: "gfx9-4-generic",
}
# Processors whose VGPR file is unified with AGPRs: the granule is 8 registers.
UNIFIED_VGPR = {"gfx90a", "gfx940", "gfx941", "gfx942", "gfx950", "gfx9-4-generic"}


def matches(data: bytes) -> bool:
    return data[:4] == ELF_MAGIC and len(data) >= 20 and data[5] == 1 and \
        int.from_bytes(data[18:20], "little") == EM_AMDGPU


def _features(flags: int, version: int) -> dict[str, str]:
    """xnack / sramecc settings from e_flags (v3: on/off bits; v4+: two-bit fields)."""
    if version == 3:
        return {"xnack": "on" if flags & 0x100 else "off", "sramecc": "on" if flags & 0x200 else "off"}
    names = {0: "unsupported", 1: "any", 2: "off", 3: "on"}
    return {"xnack": names[(flags >> 8) & 3], "sramecc": names[(flags >> 10) & 3]}


def _notes(elf: Any, data: bytes, file: str) -> list[tuple[str, int, bytes, int]]:
    """(owner, type, desc, file offset) of every note in SHT_NOTE sections."""
    found = []
    for section in elf.iter_sections():
        if section["sh_type"] != "SHT_NOTE":
            continue
        base, size = section["sh_offset"], section["sh_size"]
        if base + size > len(data):
            raise ParseError(file, f"section {section.name} at {base:#x}", "note section runs past the end of the file")
        pos, end = base, base + size
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
            name_at = pos + 12
            desc_at = name_at + ((namesz + 3) & ~3)
            nxt = desc_at + ((descsz + 3) & ~3)
            if desc_at + descsz > end:
                raise ParseError(file, f"note at {pos:#x}", f"note of {descsz} bytes runs past its section")
            owner = data[name_at:name_at + namesz].rstrip(b"\0").decode("latin-1")
            found.append((owner, ntype, data[desc_at:desc_at + descsz], desc_at))
            pos = nxt
    return found


def metadata(data: bytes, file: str = "<bytes>") -> dict[str, Any]:
    """The decoded NT_AMDGPU_METADATA map of a v3+ code object."""
    elf = open_elf(data, file)
    if elf["e_machine"] not in ("EM_AMDGPU", EM_AMDGPU):
        raise ParseError(file, "ELF header", f"e_machine is {elf['e_machine']}, not EM_AMDGPU (224)")
    notes = guarded(file, "notes", lambda: _notes(elf, data, file))
    for owner, ntype, desc, offset in notes:
        if owner == "AMDGPU" and ntype == NT_AMDGPU_METADATA:
            try:
                meta = msgpack.unpackb(desc, raw=False, strict_map_key=False)
            except Exception as err:
                raise ParseError(file, f"note at {offset:#x}", f"bad msgpack in NT_AMDGPU_METADATA: {err}") from None
            if not isinstance(meta, dict):
                raise ParseError(file, f"note at {offset:#x}", "NT_AMDGPU_METADATA is not a msgpack map")
            return meta
    if any(owner == "AMD" and ntype in V2_NOTE_TYPES for owner, ntype, _, _ in notes) \
            or data[7] == 64 and data[8] == 0:
        raise ParseError(file, "notes", "code object v2 is not supported (NT_AMD_HSA_* notes, no msgpack metadata); "
                         "recompile with code object v4 or later")
    raise ParseError(file, "notes", "no NT_AMDGPU_METADATA note (owner 'AMDGPU', type 32)")


def _descriptor(raw: bytes) -> dict[str, int]:
    group, private, kernarg = struct.unpack_from("<III", raw, 0)
    rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
    return {"group_segment_fixed_size": group, "private_segment_fixed_size": private,
            "kernarg_size": kernarg, "compute_pgm_rsrc1": rsrc1, "compute_pgm_rsrc2": rsrc2,
            "compute_pgm_rsrc3": rsrc3, "vgpr_blocks": rsrc1 & 0x3F, "sgpr_blocks": (rsrc1 >> 6) & 0xF}


def _granule_ok(count: int, blocks: int, granule: int) -> bool:
    """The note's count fits the descriptor's granulated count (blocks = ceil(n/g) - 1)."""
    return blocks * granule < max(count, 1) <= (blocks + 1) * granule


def _check(kd: dict[str, int], k: dict[str, Any], arch: str) -> list[str]:
    bad = []
    for note_key, kd_key in ((".group_segment_fixed_size", "group_segment_fixed_size"),
                             (".private_segment_fixed_size", "private_segment_fixed_size"),
                             (".kernarg_segment_size", "kernarg_size")):
        if isinstance(k.get(note_key), int) and k[note_key] != kd[kd_key]:
            bad.append(f"{note_key}: note {k[note_key]} vs kd {kd[kd_key]}")
    wave = k.get(".wavefront_size", 64)
    vgprs = k.get(".vgpr_count")
    if isinstance(vgprs, int):
        if arch in UNIFIED_VGPR:
            vgprs, granule = vgprs + (k.get(".agpr_count") or 0), 8  # AGPRs follow the VGPRs
        elif arch.startswith("gfx1"):
            granule = 8 if wave == 32 else 4
        else:
            granule = 4
        if not _granule_ok(vgprs, kd["vgpr_blocks"], granule):
            bad.append(f"vgpr: note {vgprs} vs kd {(kd['vgpr_blocks'] + 1) * granule} (granule {granule})")
    sgprs = k.get(".sgpr_count")
    if isinstance(sgprs, int) and not arch.startswith("gfx1") and not _granule_ok(sgprs, kd["sgpr_blocks"], 8):
        bad.append(f"sgpr: note {sgprs} vs kd {(kd['sgpr_blocks'] + 1) * 8} (granule 8)")
    return bad


def _int(k: dict[str, Any], key: str) -> int | None:
    v = k.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def kernels(data: bytes, file: str = "<bytes>") -> list[KernelRecord]:
    """One record per kernel of the NT_AMDGPU_METADATA note, checked against its descriptor."""
    meta = metadata(data, file)
    elf = open_elf(data, file)
    flags = int(elf["e_flags"])
    version = CODE_OBJECT_VERSIONS.get(data[8], None) if data[7] == 64 else None
    arch = MACH.get(flags & 0xFF)
    if arch is None:
        raise ParseError(file, "ELF header", f"unknown EF_AMDGPU_MACH {flags & 0xFF:#x} in e_flags {flags:#x}")
    features = _features(flags, version or 4)
    target = meta.get("amdhsa.target")
    listed = meta.get("amdhsa.kernels")
    if not isinstance(listed, list):
        raise ParseError(file, "NT_AMDGPU_METADATA", "no amdhsa.kernels list")
    by_name = {s.name: s for s in symbols(elf, file) if s.name.endswith(".kd")}
    rows = []
    for i, k in enumerate(listed):
        if not isinstance(k, dict) or not isinstance(k.get(".name"), str):
            raise ParseError(file, f"amdhsa.kernels[{i}]", "kernel entry without a .name")
        rows.append(_record(k, arch, features, target, version, by_name, elf, data, file))
    return rows


def _record(k: dict[str, Any], arch: str, features: dict[str, str], target: Any, version: int | None,
            by_name: dict[str, Any], elf: Any, data: bytes, file: str) -> KernelRecord:
    name = k[".name"]
    extra: dict[str, Any] = {
        "target": target, "code_object_version": version, **features,
        "vgpr_spill_count": _int(k, ".vgpr_spill_count"), "sgpr_spill_count": _int(k, ".sgpr_spill_count"),
        "uses_dynamic_stack": k.get(".uses_dynamic_stack"), "kernarg_segment_align": _int(k, ".kernarg_segment_align"),
        "symbol": k.get(".symbol"), "args": len(k.get(".args") or []),
    }
    kd_sym = by_name.get(k.get(".symbol") or name + ".kd")
    if kd_sym is None:
        extra["kd_mismatch"] = ["no kernel descriptor symbol"]
    else:
        raw = guarded(file, f"kernel descriptor {kd_sym.name}",
                      lambda: symbol_contents(elf, data, kd_sym, 64, file))
        kd = _descriptor(raw)
        extra["kd"] = kd
        mismatch = _check(kd, k, arch)
        if mismatch:
            extra["kd_mismatch"] = mismatch
    spills = [v for v in (extra["vgpr_spill_count"], extra["sgpr_spill_count"]) if v is not None]
    block = k.get(".reqd_workgroup_size")
    if not (isinstance(block, list) and len(block) == 3 and all(isinstance(b, int) for b in block)):
        block = None
    return KernelRecord(
        name=name, file=file, format="hsaco", arch=arch,
        registers=_int(k, ".vgpr_count"), sgpr=_int(k, ".sgpr_count"), agpr=_int(k, ".agpr_count"),
        shared_bytes=_int(k, ".group_segment_fixed_size"), local_bytes=_int(k, ".private_segment_fixed_size"),
        param_bytes=_int(k, ".kernarg_segment_size"), max_threads_per_block=_int(k, ".max_flat_workgroup_size"),
        spills=sum(spills) if spills else None, wavefront_size=_int(k, ".wavefront_size"),
        block=tuple(block) if block else None, extra=extra)
