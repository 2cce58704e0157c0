"""The evaluation protocol by unit (pure: numpy/scipy/pandas over metrics and stats).

From a per-model table of labelled zoos (:mod:`.units`): per-unit regrets and the baselines
(a random pick, the name/metadata heuristic, the final training loss); the metric and the
shortlist fraction chosen by leave-one-unit-out (:mod:`.protocol`); intervals over units
(:mod:`.intervals`); the record entry (:mod:`.entry`) and the record file (:mod:`.record`).
"""

from zoorank.evaluation.entry import SCHEMA_VERSION, build_record, evaluate, statement
from zoorank.evaluation.intervals import clopper_pearson_lower, paired_difference, summary, wilson
from zoorank.evaluation.protocol import (
                                          candidate_order,
                                          choose_metric,
                                          conformal_fraction,
                                          louo_fractions,
                                          louo_picks,
                                          shortlist_scores,
                                          unit_hits,
)
from zoorank.evaluation.record import load_record, record_block, write_record
from zoorank.evaluation.units import (
                                          board_candidates,
                                          check_table,
                                          first_near_best,
                                          metric_columns,
                                          unit_table,
                                          zoo_table,
)

__all__ = [
    "SCHEMA_VERSION", "board_candidates", "build_record", "candidate_order", "check_table",
    "choose_metric", "clopper_pearson_lower", "conformal_fraction", "evaluate", "first_near_best",
    "load_record", "louo_fractions", "louo_picks", "metric_columns", "paired_difference",
    "record_block", "shortlist_scores", "statement", "summary", "unit_hits", "unit_table",
    "wilson", "write_record", "zoo_table",
]
