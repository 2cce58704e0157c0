"""The ``score:`` options: declared once with a default, read from a mapping or an object, and every
option a registered metric reads is declared and is a field of ``ScoreOptions`` with that default."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from zoorank.config import ScoreOptions
from zoorank.metrics import registry
from zoorank.metrics.score_options import OPTIONS, option, resolve_options


@pytest.fixture
def scratch():
    name = "test_only_option"
    yield name
    OPTIONS.pop(name, None)


def test_an_option_is_declared_once_and_a_second_default_is_refused(scratch):
    first = option(scratch, 3, "a test's option")
    assert option(scratch, 3) is first
    with pytest.raises(ValueError, match="declared twice with different defaults"):
        option(scratch, 4)


def test_resolve_options_reads_a_mapping_or_attributes_and_fills_defaults(scratch):
    option(scratch, 3)
    assert resolve_options()[scratch] == 3
    assert resolve_options({scratch: 5})[scratch] == 5
    assert resolve_options(SimpleNamespace(**{scratch: 7}))[scratch] == 7
    assert resolve_options({"other": 1})[scratch] == 3
    assert set(resolve_options()) == set(OPTIONS)


def test_every_option_a_metric_reads_is_a_score_field_with_its_default():
    defaults = ScoreOptions()
    for entry in registry.REGISTRY.values():
        for name in entry.options:
            assert name in OPTIONS, (entry.name, name)
            value = getattr(defaults, name)
            expected = OPTIONS[name].default
            assert (tuple(value) if isinstance(value, list) else value) == expected, name
