"""Repeated `--opt KEY=VALUE` options, parsed once for every command and package (docs/cli.md, "One
vocabulary"): one behaviour for retrieve's `--option`, correlate's `--variant`, the studies' `--run`, ..."""

from __future__ import annotations

from recon_score.errors import OptionValueError


def key_values(values: tuple[str, ...] | list[str], option: str) -> dict[str, str]:
    """('KEY=VALUE', ...) -> {KEY: VALUE}, whitespace around each stripped. A missing `=`, an empty key or value
    and a key given twice are refused naming `option` and the item: a repeated key is a mistake that letting the
    later value win would hide."""
    out: dict[str, str] = {}
    given: dict[str, str] = {}
    for item in values:
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key or not value:
            empty = "" if not sep else " (an empty KEY)" if not key else " (an empty VALUE)"
            raise OptionValueError(f"{option}: expected KEY=VALUE, got {item!r}{empty}")
        if key in out:
            raise OptionValueError(
                f"{option}: key {key!r} given twice ({given[key]!r} and {item!r}); give each key once"
            )
        out[key], given[key] = value, item
    return out
