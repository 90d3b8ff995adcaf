"""Rewrite a wheel without the files under some folders, for a device call's size limit.

    python gpu/strip_wheel.py WHEEL OUT_DIR --drop iree/_runtime_libs_tracy/ [--drop ...] [--store]

The new wheel keeps its name (pip reads name, version and tags from it) and gets a RECORD that
lists only what is left, with each file's hash and size, so pip installs it as it would the
original. --store writes the members uncompressed, for an archive (xz) that compresses better
than zip's deflate. Used by gpu/stage_versions.sh: iree-base-runtime without its Tracy build
(iree/_runtime_libs_tracy/, loaded only with IREE_PY_RUNTIME=tracy) is about half the size.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import sys
import zipfile
from pathlib import Path


def _record_row(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def strip_wheel(wheel: Path, out_dir: Path, drop: list[str], store: bool) -> Path:
    out = out_dir / wheel.name
    if out.resolve() == wheel.resolve():
        raise SystemExit(f"{wheel}: OUT_DIR must differ from the wheel's folder")
    compression = zipfile.ZIP_STORED if store else zipfile.ZIP_DEFLATED
    rows, record_name = [], None
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", compression) as dst:
        for info in src.infolist():
            if any(info.filename.startswith(d) for d in drop):
                continue
            if info.filename.endswith(".dist-info/RECORD"):
                record_name = info.filename
                continue
            data = src.read(info)
            kept = zipfile.ZipInfo(info.filename, info.date_time)
            kept.external_attr = info.external_attr  # executable bits of the tools
            kept.compress_type = compression
            dst.writestr(kept, data)
            rows.append(_record_row(info.filename, data))
        if record_name is None:
            raise SystemExit(f"{wheel}: no .dist-info/RECORD: not a wheel")
        rows.append(f"{record_name},,")
        dst.writestr(zipfile.ZipInfo(record_name, (2020, 1, 1, 0, 0, 0)), "\n".join(rows) + "\n")
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gpu/strip_wheel.py")
    p.add_argument("wheel", type=Path)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--drop", action="append", default=[], help="folder prefix inside the wheel to leave out")
    p.add_argument("--store", action="store_true", help="write members uncompressed")
    args = p.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = strip_wheel(args.wheel, args.out_dir, args.drop, args.store)
    print(f"{out}: {out.stat().st_size} bytes (was {args.wheel.stat().st_size})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
