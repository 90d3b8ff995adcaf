"""The files stages hand each other, each with one owner here.

- bundle: BUNDLE/manifest.json and the files it names (a built variant; build writes it,
  run, inspect, compare and analyze read it).
- rundir: a `rootcause run` directory (measurement.json, env.json, the profiles it names).
- plan: OUT/plan.json (what `analyze` built: A, B, the hybrids and their bundles).
- attribution: attribution.json (the analysis result; schema, version, migration).

No other module opens these files: a change to a layout is a change to one module.
"""
