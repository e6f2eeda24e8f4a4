"""Hypothesis strategies for the instances of a JSON Schema, for the keywords strict structured
outputs use: ``type`` (object, array, string, number, integer, boolean, null), ``properties``
with ``required`` and ``additionalProperties: false``, ``items`` with ``minItems`` /
``maxItems``, ``minLength`` / ``maxLength``, ``minimum`` / ``maximum``, ``enum``, ``anyOf`` and
local ``$ref`` into ``$defs``. Any other keyword is an error, so a schema that grows one is not
silently under-tested. (hypothesis-jsonschema does this in general, but its 0.23 does not run
on the hypothesis this project uses.)"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

_HANDLED = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "enum",
    "anyOf",
    "$ref",
    "$defs",
}
# Text as a model writes it: any character, with the awkward ones (blank, punctuation only,
# newlines, CJK, the template words) common enough to be tried.
_TEXT = st.one_of(
    st.text(),
    st.sampled_from(["", " ", "...", "…", "-", "string", "fact_id", "N/A", "\n", "我喜欢咖啡"]),
    st.text(alphabet=st.sampled_from(list(" .,;:!?-_'\"<>[]{}…\n\t")), max_size=8),
)


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A strategy for the instances valid under ``schema``."""
    return _strategy(schema, schema.get("$defs", {}))


def _strategy(node: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    unknown = set(node) - _HANDLED
    if unknown:
        raise ValueError(f"schema keywords not handled: {sorted(unknown)}")
    if "$ref" in node:
        name = node["$ref"].removeprefix("#/$defs/")
        return st.deferred(lambda: _strategy(defs[name], defs))
    if "anyOf" in node:
        return st.one_of([_strategy(branch, defs) for branch in node["anyOf"]])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if kind == "object":
        assert node.get("additionalProperties") is False, "open objects are not generated"
        required = set(node.get("required", []))
        props = node.get("properties", {})
        assert required == set(props), "strict schemas require every property"
        return st.fixed_dictionaries({k: _strategy(v, defs) for k, v in props.items()})
    if kind == "array":
        return st.lists(
            _strategy(node["items"], defs),
            min_size=node.get("minItems", 0),
            max_size=min(node.get("maxItems", 8), 8),
        )
    if kind == "string":
        low, high = node.get("minLength", 0), node.get("maxLength")
        return _TEXT.filter(lambda s: len(s) >= low and (high is None or len(s) <= high))
    if kind in ("number", "integer"):
        low, high = node.get("minimum"), node.get("maximum")
        if kind == "integer":
            return st.integers(min_value=low, max_value=high)
        return st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    raise ValueError(f"schema type not handled: {kind!r}")
