"""``docs/reference/api.md``: the HTTP API rendered from the OpenAPI document the node
serves (``signaling.openapi``), which ``tests/test_openapi.py`` holds to the server."""

from __future__ import annotations

import re
from typing import Any

from signaling import openapi
from swapcast.docs_reference.markdown import anchor, code, paragraphs, prose, table

_METHODS = ("get", "post", "put", "patch", "delete")


def _schema_type(schema: dict[str, Any]) -> str:
    """A schema in a few words: a component's name (linked), ``array of X``, a type with its enum."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{anchor(name)})"
    if schema.get("type") == "array" and "items" in schema:
        return "array of " + _schema_type(schema["items"])
    for combinator in ("oneOf", "anyOf", "allOf"):
        if combinator in schema:
            return " or ".join(_schema_type(part) for part in schema[combinator])
    words = schema.get("type", "any")
    if "format" in schema:
        words += f" ({schema['format']})"
    if "enum" in schema:
        words += ": " + ", ".join(code(value) for value in schema["enum"])
    if schema.get("nullable"):
        words += " or null"
    return words


def _bodies(content: dict[str, Any]) -> str:
    return "; ".join(f"{code(media)} {_schema_type(item.get('schema', {}))}".rstrip()
                     for media, item in content.items())


def _operation(path: str, method: str, operation: dict[str, Any], errors: dict[str, str]) -> list[str]:
    out = [f"### {method.upper()} {path}", "", prose(operation.get("summary", "")) + ".", ""]
    if operation.get("description"):
        out += [prose(operation["description"]), ""]
    if operation.get("security") == []:
        out += ["No credentials needed.", ""]
    parameters = operation.get("parameters", [])
    if parameters:
        rows = [[code(p["name"]), p["in"], "yes" if p.get("required") else "", _schema_type(p.get("schema", {})),
                 prose(p.get("description", ""))] for p in parameters]
        out += [table(["Parameter", "In", "Required", "Type", "Meaning"], rows), ""]
    body = operation.get("requestBody")
    if body:
        out += [f"Request body{'' if body.get('required') else ' (optional)'}: {_bodies(body.get('content', {}))}.", ""]
    rows = []
    shared = []
    for status, response in operation.get("responses", {}).items():
        description = response.get("description", "")
        if "$ref" in response or errors.get(status) == description:
            shared.append(status)
            continue
        rows.append([code(status), prose(description), _bodies(response.get("content", {}))])
    if rows:
        out += [table(["Status", "Meaning", "Body"], rows), ""]
    if shared:
        out += ["Errors (see [Errors](#errors)): " + ", ".join(shared) + ".", ""]
    return out


def _schemas(components: dict[str, Any]) -> list[str]:
    out = ["## Schemas", ""]
    for name, schema in components.items():
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [prose(schema["description"]), ""]
        properties = schema.get("properties")
        if not properties:
            out += [f"Type: {_schema_type(schema)}.", ""]
            continue
        required = set(schema.get("required", []))
        rows = [[code(field), _schema_type(value), "yes" if field in required else "", prose(value.get("description", ""))]
                for field, value in properties.items()]
        out += [table(["Field", "Type", "Required", "Meaning"], rows), ""]
    return out


def render() -> str:
    document = openapi.openapi_document(gateway=False)
    gateway = openapi.openapi_document(gateway=True)
    errors = {status: description for status, (_, description) in openapi._ERRORS.items()}
    out = [
        "# HTTP API",
        "",
        f"The node's OpenAPI {document['openapi']} document, rendered. A running node serves it at "
        f"{code(openapi.OPENAPI_PATH)} (load it into any OpenAPI tool). {paragraphs(document['info'].get('description'))}",
        "",
        "The gateway serves the same routes and forwards them to the node that holds the resource; "
        "where it answers itself, its document adds what differs (a 502 when that node failed).",
        "",
        "## Errors",
        "",
        "Every error is a JSON object " + code('{"error": "reason"}') + " with one of these statuses:",
        "",
        table(["Status", "Meaning"], [[code(status), prose(description)] for status, description in errors.items()]),
    ]
    direct = sorted(f"{method.upper()} {path}" for path, operations in gateway["paths"].items()
                    for method, operation in operations.items()
                    if method in _METHODS and "502" not in operation.get("responses", {}))
    out += ["", "The gateway may answer 502 on every route it forwards, that is all but "
            + ", ".join(code(route) for route in direct) + "."]
    tags = [tag["name"] for tag in document.get("tags", [])]
    for tag in tags + [None]:
        section = [(path, method, operation) for path, operations in document["paths"].items()
                   for method, operation in operations.items()
                   if method in _METHODS and (operation.get("tags") or [None])[0] == tag]
        if not section:
            continue
        out += ["", f"## {tag or 'other'}", ""]
        for path, method, operation in section:
            out += _operation(path, method, operation, errors)
    out += [""] + _schemas(document.get("components", {}).get("schemas", {}))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).rstrip() + "\n"
