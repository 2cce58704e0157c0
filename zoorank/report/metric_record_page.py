"""The metric record (:mod:`zoorank.decide.metric_record`), where the report's readers found it."""

from zoorank.decide.metric_record import RECORD_FILE, WEAK_TAU, load_record, summarise

__all__ = ["RECORD_FILE", "WEAK_TAU", "load_record", "summarise"]
