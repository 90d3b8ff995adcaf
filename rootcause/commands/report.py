"""`rootcause report attribution.json --format html|markdown|json --out PATH`.

Renders what `rootcause compare` or `analyze` wrote: an HTML page that opens offline (plotly.js
inline), a GitHub-flavoured Markdown triage comment, or the attribution itself, checked and
migrated to the current schema, as JSON. Bad or unknown-schema JSON stops with one line naming
the file and the key (exit status 2).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from rootcause import argtypes
from rootcause.errors import UsageError
from rootcause.fileio import refuse_overwriting, write_atomic


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("attribution", metavar="ATTRIBUTION", help="attribution.json (rootcause compare)")
    parser.add_argument("--format", choices=("html", "markdown", "json"), default="html")
    parser.add_argument("--out", metavar="PATH", help="file to write (default: stdout)")
    parser.add_argument("--gpu", "--device", dest="device", action=argtypes.Renamed, default=None, metavar="NAME",
                        help="GPU model the profiles were captured on (e.g. H200), for occupancy, when "
                             "attribution.json and its environment do not name one (--device: the old name)")
    parser.add_argument("--title", default=None, help="page / comment title")


def run(args: argparse.Namespace) -> int:
    path = Path(args.attribution)
    if args.out:
        refuse_overwriting([args.out], [path])
    elif args.format == "html" and sys.stdout.isatty():
        # megabytes of inline plotly.js are no use in a terminal: a file, or a pipe that asked for it
        raise UsageError("--format html writes a page of several MB: give --out report.html (or pipe it), "
                         "or --format markdown to read it here")
    from rootcause import gpus  # here: `report --help` pays for argparse alone
    from rootcause.artifacts import attribution
    from rootcause.report import html_pieces, render_markdown

    doc = attribution.load(path)
    device = gpus.resolve_device(args.device) if args.device is not None else None
    text: Iterable[str]
    if args.format == "html":
        text = html_pieces(doc, device=device, title=args.title)
    elif args.format == "markdown":
        text = [render_markdown(doc, device=device, title=args.title)]
    else:
        text = [json.dumps(doc, indent=2) + "\n"]
    if args.out:
        out = write_atomic(args.out, text)
        print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    else:
        sys.stdout.writelines(text)
    return 0
