"""The diagnosis rules, one module a question (rootcause.analysis.diagnose runs them in order).

A rule is `rule(ctx: common.Context) -> list[Finding]` (analysis.result.Finding, made by
common.finding). A frontend contributes what only it can read through its hooks
(rootcause.frontends.base), never a rule that spells its identifiers."""
