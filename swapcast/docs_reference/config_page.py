"""``docs/reference/config.md``: every key of the config schema (``swapcast/config.py``)
with its type, default, bounds and meaning.

The meaning is the field's ``description`` where it has one, else the comment beside the
key in ``configs/default.yaml`` (a file the tests hold equal to the schema's defaults);
a key with neither is reported by ``undocumented_keys``, and the docs tests fail on it."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from swapcast import config as schema
from swapcast.docs_reference.markdown import code, paragraphs, prose, table

DEFAULT_YAML = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"
_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("multiple_of", "a multiple of"),
           ("min_length", "length ≥"), ("max_length", "length ≤"), ("pattern", "matches"))


def yaml_comments(text: str) -> dict[str, str]:
    """``{"engine.swapper": "its comment", "engine": "the section's comment", ...}`` from a
    config file laid out as ``configs/default.yaml`` is: ``key: value  # comment``, a
    comment line indented under the comment column continuing the key above."""
    comments: dict[str, str] = {}
    path: list[tuple[int, str]] = []
    last: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if not stripped:
            last = None
            continue
        if stripped.startswith("#"):
            if last is not None and indent > 0:
                comments[last] = f"{comments.get(last, '')} {stripped.lstrip('#').strip()}".strip()
            continue
        match = re.match(r"([A-Za-z_][\w]*):(.*)$", stripped)
        if match is None:
            last = None
            continue
        while path and path[-1][0] >= indent:
            path.pop()
        path.append((indent, match.group(1)))
        key = ".".join(name for _, name in path)
        comment = re.search(r"(?:^|\s)#\s?(.*)$", match.group(2))
        if comment:
            comments[key] = comment.group(1).strip()
        last = key
    return comments


def type_name(annotation: Any) -> str:
    """The type of a config value in words (``one of auto, cpu``, ``list of string``, ...)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(code(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        named = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin is list:
        return "list of " + type_name(args[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "{" + ", ".join(annotation.model_fields) + "}"
    simple = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "path", SecretStr: "secret string"}
    return simple.get(annotation, getattr(annotation, "__name__", str(annotation)))


def bounds(field: FieldInfo) -> str:
    found = []
    for item in field.metadata:
        for attribute, words in _BOUNDS:
            value = getattr(item, attribute, None)
            if value is not None:
                found.append(f"{words} {code(value)}")
    return ", ".join(found)


def default_text(value: Any) -> str:
    if isinstance(value, SecretStr):
        value = "(secret)"
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    dumped = yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True).strip()
    return code(dumped.removesuffix("\n...").removesuffix("...").strip())


def sections(model: type[BaseModel] = schema.Config, prefix: str = "") -> Iterator[tuple[str, type[BaseModel]]]:
    """(dotted name, model) of every section, nested ones after their parent."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            dotted = f"{prefix}{name}"
            yield dotted, annotation
            yield from sections(annotation, dotted + ".")


def keys(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, FieldInfo]]:
    """(dotted key, field) of a section's own values (not its nested sections)."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            yield f"{prefix}.{name}", field


def meaning(key: str, field: FieldInfo, comments: dict[str, str]) -> str:
    return field.description or comments.get(key, "")


def undocumented_keys(comments: dict[str, str] | None = None) -> list[str]:
    """Config keys with neither a ``description`` nor a comment in configs/default.yaml."""
    comments = yaml_comments(DEFAULT_YAML.read_text(encoding="utf-8")) if comments is None else comments
    return [key for section, model in sections() for key, field in keys(model, section)
            if not meaning(key, field, comments)]


def render() -> str:
    comments = yaml_comments(DEFAULT_YAML.read_text(encoding="utf-8"))
    out = [
        "# Configuration keys",
        "",
        paragraphs(schema.__doc__),
        "",
        f"Every key below, under its section's heading, is also listed with its default in "
        f"{code('configs/default.yaml')}. A key "
        f"{code('section.key')} is set in the environment as {code('SWAPCAST_SECTION__KEY')} (nested: "
        f"{code('SWAPCAST_ENGINE__PROCESSORS__ENHANCER=live')}). A value outside its bounds, or an unknown "
        "key, stops the command with one line naming it.",
    ]
    for section, model in sections():
        out += ["", f"## {section}", ""]
        if model.__doc__ and model.__doc__ is not BaseModel.__doc__:
            out += [paragraphs(model.__doc__), ""]
        elif comments.get(section):
            out += [prose(comments[section]), ""]
        rows = []
        for key, field in keys(model, section):
            default = field.get_default(call_default_factory=True)
            rows.append([code(key.rsplit('.', 1)[-1]), type_name(field.annotation), default_text(default), bounds(field),
                         prose(meaning(key, field, comments))])
        out.append(table(["Key", "Type", "Default", "Bounds", "Meaning"], rows))
    return "\n".join(out) + "\n"
