"""The two papers' claims as an output: a verdict for every claim, model, checkpoint and sublayer kind.

Modules: ``catalogue`` (the claims: id, statement, statistic, the paper's number; no numpy), ``verdicts`` (the
rules that turn a statistic, its interval and a reference into holds / fails / reversed / inconclusive /
not_applicable with a reason; no numpy), ``anchors`` (Paper A's statistics from the per-anchor tables, with a
bootstrap over anchors) and ``table`` (a model's claims table from the tables its run wrote, and the table
across models). The method: docs/methods.md, "Claims"; the columns: docs/outputs.md.
"""
