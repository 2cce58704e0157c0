"""The ``datasets:`` section: one :class:`DatasetSpec` per image set."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from zoorank.config.schema_base import (
    RELATIVE_PATHS,
    Name,
    Strict,
)


class DatasetSpec(Strict):
    """One set of images every model is run on (an entry of ``datasets:``)."""

    name: Name
    """The dataset's name: its folder in the store and the prefix of its leaderboard columns
    (`<name>/<metric>`). Letters, digits, `_`, `.` and `-`, starting with a letter or digit;
    `prior` is reserved. Required."""
    source: Literal["parquet", "image_folder", "sklearn_digits", "numpy"]
    """Where the images come from: `parquet` (a Parquet file with a column of encoded images),
    `image_folder` (image files under a folder, searched recursively; hidden files skipped),
    `sklearn_digits` (scikit-learn's bundled 8×8 digits, 1,797 images with labels; no `path`) or
    `numpy` (an `.npz` with an `images` array and optional `labels` and `label_names`, or an
    `.npy` images array). Required."""
    path: str | None = Field(default=None, description=(
        "The Parquet file, image folder or `.npz`/`.npy` file: a local path or a URI (`s3://`, "
        "`gs://`; credentials from the environment, never from the URI). Required except for "
        "`sklearn_digits`. " + RELATIVE_PATHS))
    image_column: str = "image"
    """`parquet`: the column of encoded images (bytes, or a struct with a `bytes` field).
    Default `image`."""
    label_column: str | None = None
    """`parquet`: the column of labels (integers, or strings read as class names in the order of
    a `classes.json` beside the file, else sorted). Only the label oracle and `zoorank ask` /
    `label` use labels; the ranking never does. Default: none (no labels)."""
    labels_from_folders: bool = False
    """`image_folder`: take each image's label from its first sub-folder (class names sorted).
    Default `false`."""
    classes: list[str] | None = None
    """Class names of a dataset without labels of its own, for `zoorank ask` and `zoorank label`
    (the labels people give back are these names). Default: none."""
    limit: int | None = Field(default=None, gt=0)
    """Use a seeded, deterministic subset of this many samples (it depends only on `seed` and the
    number of samples). Default: every sample."""
    on_bad_image: Literal["skip", "fail"] = "skip"
    """An image that cannot be decoded: `skip` leaves it out, counted in the manifest and the
    embed summary; `fail` stops the run naming it. Default `skip`."""

    @field_validator("name")
    @classmethod
    def _not_prior(cls, name: str) -> str:
        # leaderboard columns are <dataset>/<metric>; prior/<name> holds the models' prior: values
        if name == "prior":
            raise ValueError("'prior' is reserved (the leaderboard's prior/<name> columns)")
        return name

    @property
    def has_labels(self) -> bool:
        """Whether the dataset brings labels of its own (as ``sources.sample_index`` keeps them)."""
        return self.source in ("sklearn_digits", "numpy") or bool(self.label_column) or (
            self.source == "image_folder" and self.labels_from_folders)

    @model_validator(mode="after")
    def _path_required(self) -> DatasetSpec:
        if self.source != "sklearn_digits" and not self.path:
            raise ValueError(f"source {self.source!r} needs a 'path'")
        return self
