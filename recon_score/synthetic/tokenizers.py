"""Real tokenizers built offline: a byte-level BPE trained in-process (Qwen-style) and CLIP's own BPE.

No hub is reachable here, so tiny models cannot borrow `hf-internal-testing` tokenizers as diffusers' tests do.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

# Qwen2/3 special tokens, including the vision placeholders Qwen-VL processors expect.
QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
    "<|video_pad|>", "<think>", "</think>",
]  # fmt: skip

# Qwen-VL's config field -> the vision token it names
QWEN_VISION_TOKENS = {
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
}


def vision_token_ids(tokenizer) -> dict[str, int]:
    """Qwen-VL's vision-token config fields with `tokenizer`'s ids for them."""
    return {field: tokenizer.convert_tokens_to_ids(token) for field, token in QWEN_VISION_TOKENS.items()}


# Qwen's chat template, reduced to what Z-Image and Qwen-VL use: text turns and image/video placeholders.
QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or 'video' in part %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _training_corpus() -> list[str]:
    """Remote-sensing caption text: the bundled UCM captions plus the prompts the smoke runs send."""
    from recon_score.prompts import PERSPECTIVE_TEMPLATE

    sample = Path(__file__).resolve().parent.parent / "sample" / "captions.jsonl"
    rows = [json.loads(line) for line in sample.read_text(encoding="utf-8").splitlines() if line]
    # the human references only: adding distractor rows to the sample must not change the fixtures' vocabulary
    lines = [r["caption"] for r in rows if r.get("kind", "reference") == "reference"]
    extra = [
        PERSPECTIVE_TEMPLATE,
        "two planes are parked on the apron next to the terminal of an airport",
        "many buildings and green trees are around a playground with a red running track",
        "a river crosses the dense residential area with roads, bridges, cars and ships",
        "farmland, forest, harbor, beach, baseball diamond, tennis court, storage tanks, parking lot",
        "Describe this remote sensing image in detail. You are a professional expert.",
    ]
    return (lines + extra) * 4


def train_qwen_tokenizer(vocab_size: int = 1024):
    """A Qwen2Tokenizer whose byte-level BPE vocabulary is trained here (deterministic for a fixed corpus)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=QWEN_SPECIAL_TOKENS,
        show_progress=False,
    )
    bpe.train_from_iterator(_training_corpus(), trainer)
    state = json.loads(bpe.to_str())
    vocab = state["model"]["vocab"]
    merges = [tuple(m) for m in state["model"]["merges"]]
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, model_max_length=32768)
    tok.add_special_tokens({"additional_special_tokens": QWEN_SPECIAL_TOKENS[1:]})
    tok.chat_template = QWEN_CHAT_TEMPLATE
    return tok


def generation_ids(tokenizer) -> dict[str, int]:
    """pad and end ids of a Qwen chat model's generation config (a turn ends at <|im_end|>)."""
    return {
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
    }


def qwen3_vl_processor(tokenizer, *, patch_size: int, **image_options):
    """A Qwen3VLProcessor around `tokenizer`: patches of `patch_size`, merged 2x2, 2 frames a temporal patch."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    sizes = {"patch_size": patch_size, "merge_size": 2, "temporal_patch_size": 2}
    return Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(**sizes, **image_options),
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(**sizes),
        chat_template=tokenizer.chat_template,
    )


def write_clip_vocab(directory: Path) -> Path:
    """vocab.json + merges.txt of OpenAI CLIP, rebuilt from the BPE merges file open_clip ships as
    open_clip.tokenizer.SimpleTokenizer builds its vocabulary (49,408 entries)."""
    import open_clip
    from open_clip.tokenizer import bytes_to_unicode

    bpe_path = Path(open_clip.__file__).resolve().parent / "bpe_simple_vocab_16e6.txt.gz"
    with gzip.open(bpe_path) as f:
        merges = f.read().decode("utf-8").split("\n")
    merges = merges[1 : 49152 - 256 - 2 + 1]
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab]
    vocab.extend("".join(m.split()) for m in merges)
    vocab.extend(["<|startoftext|>", "<|endoftext|>"])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}), encoding="utf-8")
    (directory / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    return directory


def clip_tokenizer(directory: Path):
    """transformers' CLIPTokenizer over the real CLIP vocabulary (ids identical to open_clip's tokenizer). Built
    with from_pretrained(dir): constructing from a vocab file path can silently give a 2-token vocabulary."""
    from transformers import CLIPTokenizer

    write_clip_vocab(directory)
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "model_max_length": 77,  # without it diffusers overflows
                "bos_token": "<|startoftext|>",
                "eos_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "do_lower_case": True,
            }
        ),
        encoding="utf-8",
    )
    tok = CLIPTokenizer.from_pretrained(directory)
    if len(tok) != 49408:
        raise RuntimeError(f"CLIP tokenizer built from {directory} has {len(tok)} tokens, expected 49408")
    return tok
