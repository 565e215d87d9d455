"""An mkdocs hook: the configuration reference, rendered from the settings models themselves.

A page marks where a table goes with ``<!-- settings-table: module:Class -->``; the hook replaces
the marker with one row per field of that pydantic-settings model: its environment variable
(the model's ``env_prefix`` plus the field name), its default, its accepted values and its
description. The table cannot drift from the code, and a field without a description fails the
build (``mkdocs build --strict`` in CI), so every setting is documented where it is declared.
"""

from __future__ import annotations

import importlib
import re
import typing
from typing import Any

from annotated_types import Ge, Gt, Le, Lt
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

KINDS = {
    "SecretStr": "secret",
    "str": "text",
    "bool": "true/false",
    "int": "integer",
    "float": "number",
}

MARKER = re.compile(r"<!--\s*settings-table:\s*([\w.]+):(\w+)\s*-->")


class UndocumentedSetting(ValueError):
    """A settings field has no description, so its row would say nothing."""


def load_model(module: str, name: str) -> type[BaseSettings]:
    model = getattr(importlib.import_module(module), name)
    if not (isinstance(model, type) and issubclass(model, BaseSettings)):
        raise TypeError(f"{module}:{name} is not a pydantic-settings model")
    return model


def env_var(model: type[BaseSettings], field: str) -> str:
    return f"{model.model_config.get('env_prefix', '')}{field}".upper()


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def default_text(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return _code(str(value).lower())
    if isinstance(value, dict):
        return _code("{}") if not value else _code(repr(value))
    return _code(f"{value:_}".replace("_", ",") if isinstance(value, int) else str(value))


def accepted_text(info: FieldInfo) -> str:
    annotation = info.annotation
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return " or ".join(_code(str(a)) for a in args)
    if typing.get_origin(annotation) is dict:
        kind = "JSON object"
    else:
        names = [getattr(a, "__name__", str(a)) for a in args if a is not type(None)]
        kind = "/".join(names) if args else getattr(annotation, "__name__", str(annotation))
        kind = KINDS.get(kind, kind)
    bounds = []
    for rule in info.metadata:
        for cls, attr, sign in ((Ge, "ge", "≥"), (Gt, "gt", ">"), (Le, "le", "≤"), (Lt, "lt", "<")):
            if isinstance(rule, cls):
                bounds.append(f"{sign} {getattr(rule, attr)}")
    return ", ".join([kind, *bounds])


def render_table(model: type[BaseSettings]) -> str:
    rows = ["| variable | default | accepted | meaning |", "| --- | --- | --- | --- |"]
    for name, info in model.model_fields.items():
        if not info.description:
            raise UndocumentedSetting(f"{model.__name__}.{name} has no description")
        description = info.description.replace("|", "\\|").replace("\n", " ")
        variable = env_var(model, name)
        rows.append(
            f"| `{variable}` | {default_text(info)} | {accepted_text(info)} | {description} |"
        )
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs' hook: every marker on a page becomes its model's table."""
    return MARKER.sub(lambda m: render_table(load_model(m.group(1), m.group(2))), markdown)
