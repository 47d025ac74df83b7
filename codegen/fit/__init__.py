"""The searches above lowering and planning: which context, stream chunk,
pins and prefill batch a build gets (search.py), and the trade-off tables
`plan` prints beside the choice (tradeoffs.py)."""
