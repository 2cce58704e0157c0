"""zoorank.labels.table: reading label files (CSV, Label Studio JSON and JSON_MIN) and checking rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from zoorank.errors import InputError
from zoorank.labels.table import check_labels, parse_csv, parse_label_studio


def test_csv_rows_skip_unanswered_and_name_their_line():
    rows = parse_csv("sample_id,label,source\n3,cat,a.png\n4,,b.png\n 5 , dog ,c.png\n", "f.csv")
    assert [(r.sample_id, r.label, r.where) for r in rows] == [
        ("3", "cat", "f.csv line 2"), ("5", "dog", "f.csv line 4")]
    with pytest.raises(InputError, match="needs the columns sample_id and label"):
        parse_csv("id,class\n1,cat\n", "f.csv")


def test_label_studio_takes_the_latest_answer_and_reads_json_min():
    export = [
        {"data": {"sample_id": 7, "image": "x"}, "annotations": [
            {"result": [{"type": "choices", "value": {"choices": ["cat"]}}]},
            {"was_cancelled": True, "result": [{"value": {"choices": ["dog"]}}]},
        ]},
        {"data": {"sample_id": 8}, "annotations": []},  # not answered: skipped
        {"image": "y", "sample_id": 9, "choice": "dog"},  # JSON_MIN
    ]
    rows = parse_label_studio(json.dumps(export), "e.json")
    assert [(r.sample_id, r.label, r.where) for r in rows] == [
        (7, "cat", "e.json task 1"), (9, "dog", "e.json task 3")]
    with pytest.raises(InputError, match="not JSON"):
        parse_label_studio("{", "e.json")


def test_check_labels_drops_known_repeats_and_refuses_bad_rows():
    rows = parse_csv("sample_id,label\n1,cat\n2,dog\n1,cat\n", "f.csv")
    new = check_labels(rows, "d", np.array([1, 2, 3]), ("cat", "dog"), known={2: "dog"})
    assert new.to_dict("records") == [{"sample_id": 1, "label": "cat"}]
    with pytest.raises(InputError, match=r"f.csv line 2: sample_id '1.5' is not an integer"):
        check_labels(parse_csv("sample_id,label\n1.5,cat\n", "f.csv"), "d", np.array([1]),
                     ("cat",), {})
