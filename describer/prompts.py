"""Captioning prompts. Templates for reconstruction live in recon_score.prompts."""

from __future__ import annotations

from pathlib import Path

from recon_score.textfiles import read_text

# The ReconScore paper, RemoteDescriber guideline prompt (authors' text, verbatim, including its missing spaces).
GUIDELINE_PROMPT = (
    "You are a professional expert in the field of remote sensing, specializing in captioning remote sensing "
    "images. You will receive a remote sensing image. Your goal is to generate a informative and accurate "
    "description of a remote sensing image.Guidelines:1. Extract key objects and details as much as possible.2. "
    "You should describe the attributes of objects in detail, including object quantity, color, material, shape, "
    "size, and spatial position and relative position.3. Don't generate non-sense content, inaccuracies, and "
    "irrelevant information. Highlight essential visual elements and don't describe feeling or atmosphere.4. You "
    "should first describe the overall scene of the image, followed by describing specific object.5. The output "
    "should be coherent, concise and logical."
)

# A one-line prompt for quick looks and ablations.
BRIEF_PROMPT = "Describe this remote sensing image in one detailed sentence."

PROMPTS = {"paper": GUIDELINE_PROMPT, "guideline": GUIDELINE_PROMPT, "brief": BRIEF_PROMPT}


def load_prompt(value: str) -> str:
    """A prompt given as a name in PROMPTS, a path to a text file, or the prompt text itself."""
    if value in PROMPTS:
        return PROMPTS[value]
    path = Path(value).expanduser()
    if len(value) < 4096 and path.suffix in (".txt", ".md", ".prompt") and path.is_file():
        text = read_text(path, what="prompt file").strip()
        if not text:
            raise ValueError(f"prompt file {path} is empty")
        return text
    if not value.strip():
        raise ValueError("the prompt is empty")
    return value
