"""Statistics over models: pure functions on per-model values (no I/O, no Ray, no config).

Ranks and their aggregation (``ranks``), agreement of a metric with the label oracle and the
bootstrap over models (``agreement``), consensus among metrics (``consensus``), priors and
confounds (``priors``), rank uncertainty from fold bootstraps (``uncertainty``) and the model
confidence set (``confidence_set``), the shortlist rule (``shortlist_rule``) and the health flags of
one model's embeddings (``health``).
"""
