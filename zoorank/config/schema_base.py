"""What every config section shares: the name patterns, the strict base class and the one-line JSON schema."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)
from pydantic.json_schema import GenerateJsonSchema

from zoorank.metrics import registry

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=200)]
#: a ``prior:`` name (a leaderboard column ``prior/<name>``) and its value: a finite number, never
#: a string, a bool or null (strict: "76.1" is an error that names the field).
PriorName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$", max_length=100)]
PriorValue = Annotated[float, Field(strict=True, allow_inf_nan=False)]

#: label-free metrics a run can ask for (config names; zoorank.metrics.registry is the table, and
#: validation reads it live, so a metric registered later is accepted too).
LABEL_FREE_METRICS = registry.config_names()
#: every label-free metric, in this order, unless a config lists its own.
DEFAULT_METRICS = list(LABEL_FREE_METRICS)


#: how the schema's descriptions name relative paths (and docs/reference/config-paths.md explains).
RELATIVE_PATHS = ("A relative path is taken from the folder of the config file (not the working "
                  "directory); absolute paths, `~` and URIs (`s3://`, `gs://`) are used as they are.")


class OneLineSchema(GenerateJsonSchema):
    """Pydantic's JSON schema, with each description on one line (a docstring's line breaks are
    layout, and a description is read in editors' hovers and in tables)."""

    def generate(self, schema: Any, mode: Any = "validation") -> dict[str, Any]:
        return _one_line(super().generate(schema, mode=mode))


def _one_line(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: " ".join(v.split()) if k == "description" and isinstance(v, str)
                else _one_line(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_one_line(v) for v in node]
    return node


class Strict(BaseModel):
    """Base for every config section: unknown keys are errors that name the key; a string just
    below a field is its description (in ``RunConfig.model_json_schema()`` and the docs)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @classmethod
    def model_json_schema(cls, *args: Any, schema_generator: type[GenerateJsonSchema] | None = None,
                          **kwargs: Any) -> dict[str, Any]:
        """The JSON schema (``zoorank config schema``), every description on one line."""
        return super().model_json_schema(*args, schema_generator=schema_generator or OneLineSchema,
                                         **kwargs)
