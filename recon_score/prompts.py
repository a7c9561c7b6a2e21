"""Prompt templates for reconstruction. The describer's captioning prompts live in `describer.prompts`."""

from __future__ import annotations

from pathlib import Path

from recon_score.errors import InputError
from recon_score.textfiles import has_visible_text, read_text

# The ReconScore paper and its authors' code, verbatim (including the single spaces around {caption}).
PERSPECTIVE_TEMPLATE = (
    "I want a remote sensing image with a realistic satellite perspective view. {caption} "
    "Remember, I want a vertical remote sensing satellite perspective from top to bottom."
)

# For ablations: the bare caption, no perspective framing.
PLAIN_TEMPLATE = "{caption}"

TEMPLATES = {"perspective": PERSPECTIVE_TEMPLATE, "plain": PLAIN_TEMPLATE}


def load_template(value: str) -> str:
    """A template given as a name in TEMPLATES, a path to a text file, or the template text itself."""
    if value in TEMPLATES:
        return TEMPLATES[value]
    path = Path(value)
    if "{caption}" not in value and path.suffix in (".txt", ".jinja", ".tmpl") and path.is_file():
        value = read_text(path, what="prompt template").strip("\n")
    if value.count("{caption}") != 1:
        raise ValueError(f"a prompt template must contain '{{caption}}' exactly once, got {value!r}")
    return value


def clean_caption(caption: object, *, collapse_whitespace: bool = False) -> str:
    """The caption text the prompt is built from: as given, as the authors' ``generate_image`` concatenates it
    (`collapse_whitespace=True`, a named variant, joins whitespace runs). InputError for what cannot be a caption:
    None, not a string, empty, or without a visible character."""
    if caption is None:
        raise InputError("caption is missing")
    if not isinstance(caption, str):
        raise InputError(f"caption must be text, got {type(caption).__name__}: {caption!r}")
    if not caption.strip():
        raise InputError("caption is empty or whitespace-only")
    if not has_visible_text(caption):
        raise InputError(
            "caption has no visible character (only white space, zero-width, control or combining characters, "
            "or blank-drawn ones such as U+3164 HANGUL FILLER)"
        )
    return " ".join(caption.split()) if collapse_whitespace else caption


def format_prompt(template: str, caption: str) -> str:
    # str.replace, not str.format: captions legitimately contain braces
    return template.replace("{caption}", caption)
