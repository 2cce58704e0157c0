"""Fixtures the few-label metrics' tests share: digits images as pixel features."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def pixels(digits):
    """400 digits images as 64 pixel features in [0, 1], with their labels."""
    images, labels = digits
    return images.reshape(len(images), -1)[:400] / 16.0, labels[:400]


@pytest.fixture(scope="module")
def pixels600(digits):
    """600 digits images as 64 pixel features in [0, 1], with their labels."""
    images, labels = digits
    return images.reshape(len(images), -1)[:600] / 16.0, labels[:600]
