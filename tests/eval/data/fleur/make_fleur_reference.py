"""Reference data for FLEUR's judge input, made once by the authors' own functions (not a copy of them).

Run from a scratch folder holding the two upstream checkouts:
    python make_fleur_reference.py FLEUR_CHECKOUT LLAVA_CHECKOUT OUT_DIR
with Yebin46/FLEUR at b9cd6c9c086113b9ad3d040522a85c776aff1225 and its LLaVA submodule (haotian-liu/LLaVA) at
ab58dc18a35d5312bcedd98a9d266231ddcb75a4. It renders the judge's prompt as fleur.py / reffleur.py do (their
instruction f-string, `DEFAULT_IMAGE_TOKEN + '\\n' + inp`, `conv_templates["llava_v1"]`, `get_prompt()`) and pads
tiny images with LLaVA's `expand2square` and the colour `process_images` derives from an image processor's mean.
Writes prompts.json, input_*.png and padded_*.png.
"""

import ast
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
from PIL import Image

CANDIDATE = "a farm   near a road"  # fleur.py joins the caption's whitespace: ' '.join(caption.split())
REFERENCES = ["a farm", "green fields beside a road"]  # reffleur.py: '\n'.join(ground_truth)
MEANS = {"clip": (0.48145466, 0.4578275, 0.40821073), "half": (0.5, 0.5, 0.5)}  # LLaVA-1.5's CLIP; Qwen-VL's
SIZES = [(7, 4), (4, 9), (5, 5), (2, 6)]


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _instruction(script: Path) -> str:
    """The `inp = f'...'` instruction of the authors' script, as an f-string source to format."""
    for node in ast.walk(ast.parse(script.read_text())):
        is_inp = isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "inp"
        if is_inp and isinstance(node.value, ast.JoinedStr):
            return ast.unparse(node.value)
    raise SystemExit(f"no instruction in {script}")


def main(fleur: Path, llava: Path, out: Path) -> None:
    sys.modules["llava"] = types.ModuleType("llava")  # their __init__ would load the whole model code
    sys.modules["llava"].__path__ = [str(llava / "llava")]
    constants = _module("llava.constants", llava / "llava" / "constants.py")
    conversation = _module("llava.conversation", llava / "llava" / "conversation.py")
    mm_utils = _module("llava.mm_utils", llava / "llava" / "mm_utils.py")
    out.mkdir(parents=True, exist_ok=True)
    candidate = " ".join(CANDIDATE.split())
    reference = "\n".join(REFERENCES)
    prompts = {}
    for name in ("fleur", "reffleur"):
        inp = eval(_instruction(fleur / f"{name}.py"), {"candidate": candidate, "reference": reference})
        conv = conversation.conv_templates["llava_v1"].copy()
        conv.append_message(conv.roles[0], constants.DEFAULT_IMAGE_TOKEN + "\n" + inp)
        conv.append_message(conv.roles[1], None)
        prompts[name] = {"instruction": inp, "prompt": conv.get_prompt()}
    prompts["candidate"], prompts["references"] = CANDIDATE, REFERENCES
    (out / "prompts.json").write_text(json.dumps(prompts, indent=1) + "\n")
    rng = np.random.default_rng(0)
    for w, h in SIZES:
        image = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        image.save(out / f"input_{w}x{h}.png")
        for mean_name, mean in MEANS.items():
            padded = mm_utils.expand2square(image, tuple(int(x * 255) for x in mean))
            padded.save(out / f"padded_{w}x{h}_{mean_name}.png")


if __name__ == "__main__":
    main(*map(Path, sys.argv[1:4]))
