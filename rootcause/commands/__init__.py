"""One module per CLI command: add_arguments(parser) and run(args) -> exit status."""
from __future__ import annotations

# name -> (module, one-line help). Modules are imported only when their command runs, so
# `rootcause inspect` does not pay for importing TVM.
COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("rootcause.commands.inspect", "per-kernel resources of binaries, bundles and modules"),
    "build": ("rootcause.commands.build", "build one variant spec into a self-contained bundle"),
    "run": ("rootcause.commands.run", "verify, measure and profile bundles on this host"),
    "compare": ("rootcause.commands.compare", "attribute the delta between two captured profiles"),
    "report": ("rootcause.commands.report", "render attribution.json as HTML, Markdown or JSON"),
    "analyze": ("rootcause.commands.analyze", "build, run, attribute, confirm and report A against B"),
    "sweep": ("rootcause.commands.sweep", "many analyze pairs from one file, here or on a Ray cluster"),
    "bisect": ("rootcause.commands.bisect", "find the compiler release that first shows a change, then analyze it"),
    "completion": ("rootcause.commands.completion", "a bash or zsh completion script for rootcause"),
}
