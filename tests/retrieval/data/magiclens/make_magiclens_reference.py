"""Reference outputs of the MagicLens authors' code for reconscore's loader tests (run once, outside the project).

Environment: a scratch venv with jax, flax and msgpack from the package index; the authors' model.py and
layers.py (google-deepmind/magiclens) unmodified in this folder; scenic's pure-flax CLIP layers
(google-research/scenic scenic/projects/baselines/clip/layers.py) unmodified under scenic/projects/baselines/clip/.
scenic's clip/model.py imports TensorFlow and downloads, so a module with the three names model.py reads from it
(IMAGE_RESOLUTION, CONFIGS, normalize_image: scenic's mean/std values) is registered in its place, adding a tiny
configuration. The CLIP tokenizer there is git-only: token ids are fed directly.

Writes, next to this script:
    magiclens_tiny.pkl          the released format: pickle.dumps(flax.serialization.to_bytes(params))
    magiclens_reference.npz     inputs (ids, images in [0, 1], a PNG's RGB) and the authors' outputs for them
    flax_leaves.msgpack         flax.serialization.msgpack_serialize of a bfloat16 leaf and a chunked leaf
    flax_leaves.npz             their values as float32
"""

import pickle
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# scenic's clip/model.py in place: the names MagicLens's model.py reads, with scenic's values, plus "tiny".
clip_model = types.ModuleType("scenic.projects.baselines.clip.model")
clip_model.IMAGE_MEAN = np.array([0.48145466, 0.4578275, 0.40821073])
clip_model.IMAGE_STD = np.array([0.26862954, 0.26130258, 0.27577711])
clip_model.normalize_image = lambda img: (img - clip_model.IMAGE_MEAN) / clip_model.IMAGE_STD
clip_model.IMAGE_RESOLUTION = {"vit_tiny": 8}
clip_model.CONFIGS = {
    "vit_tiny": dict(
        embed_dim=16,
        vocab_size=64,
        vision_num_layers=1,
        vision_features=16,
        vision_patch_size=4,
        text_features=16,
        text_num_heads=2,
        text_num_layers=1,
    )
}
sys.modules["scenic.projects.baselines.clip.model"] = clip_model

from scenic.projects.baselines.clip import layers as clip_layers  # noqa: E402


class TinyHeadCLIP(clip_layers.CLIP):
    """scenic's CLIP with 8-d vision heads (its default, 64, would need a 64-wide tower: a larger file)."""

    vision_head_dim: int = 8


clip_layers.CLIP = TinyHeadCLIP

import model as magiclens_model  # noqa: E402  (the authors' model.py)

magiclens_model.MagicLensConfig["tiny"] = dict(
    embed_dim=16,
    ff_hidden_size=16 * 4,
    num_layers=2,
    num_heads=2,
    num_query_token=1,
    clip_model_name="vit_tiny",
)


def inner_zero_outputs(model, params, images) -> dict:
    """Texts with token id 0 before the end marker (0 is CLIP's bare "!" token, e.g. in 'the banner says "go!".'):
    scenic's TextEncoder masks those keys (make_attention_mask(text > 0, text > 0) with the causal mask)."""
    ids = np.array(
        [[62, 5, 0, 33, 63, 0, 0, 0], [62, 0, 0, 63, 0, 0, 0, 0], [62, 40, 2, 0, 11, 0, 50, 63]], np.int32
    )
    batch = {"ids": jnp.asarray(ids), "image": jnp.asarray(images)}
    out = model.apply(params, batch)
    _, txt_emb = model.apply(params, batch, method=model.clip_encode)
    return {
        "inner0_ids": ids,
        "inner0_clip_text": np.asarray(txt_emb),
        "inner0_multimodal_embed_norm": np.asarray(out["multimodal_embed_norm"]),
    }


def main() -> None:
    model = magiclens_model.MagicLens("tiny")
    length = 8  # token sequence length (the release uses 77)
    params = model.init(
        jax.random.PRNGKey(0),
        {
            "ids": jnp.ones((1, 1, length), jnp.int32),
            "image": jnp.ones((1, 8, 8, 3), jnp.float32),
        },
    )
    # non-trivial values everywhere (flax initialises biases, LayerNorm offsets and some embeddings to 0/1)
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
    leaves = [x + 0.1 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]
    params = jax.tree_util.tree_unflatten(tree, leaves)
    (HERE / "magiclens_tiny.pkl").write_bytes(pickle.dumps(serialization.to_bytes(params), protocol=4))

    # eot (the largest id) marks the pooled position, as CLIP's tokenizer does; 0 pads
    ids = np.array(
        [
            [62, 5, 17, 33, 63, 0, 0, 0],
            [
                62,
                63,
                0,
                0,
                0,
                0,
                0,
                0,
            ],  # the empty text: how MagicLens embeds database images
            [62, 40, 2, 9, 11, 29, 50, 63],
        ],
        np.int32,
    )
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, size=(3, 12, 10, 3)).astype(np.float32)  # cropped to 10x10, resized to 8x8
    out = model.apply(params, {"ids": jnp.asarray(ids), "image": jnp.asarray(images)})
    img_emb, txt_emb = model.apply(
        params,
        {"ids": jnp.asarray(ids), "image": jnp.asarray(images)},
        method=model.clip_encode,
    )
    pixels = model.apply(params, jnp.asarray(images), method=model._preprocess_images)
    # a PNG through the authors' data_utils.process_img (RGB / max, resized to the model's size)
    from data_utils import process_img
    from PIL import Image

    rgb = rng.integers(0, 200, size=(13, 9, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(HERE / "reference.png")
    png_image = process_img(str(HERE / "reference.png"), 8)
    png_embed = model.apply(params, {"ids": jnp.asarray(ids[:1]), "image": jnp.asarray(png_image)})
    np.savez(
        HERE / "magiclens_reference.npz",
        ids=ids,
        images=images,
        pixels=np.asarray(pixels),
        clip_image=np.asarray(img_emb),
        clip_text=np.asarray(txt_emb),
        multimodal_embed=np.asarray(out["multimodal_embed"]),
        multimodal_embed_norm=np.asarray(out["multimodal_embed_norm"]),
        png_rgb=rgb,
        png_process_img=np.asarray(png_image),
        png_embed_norm=np.asarray(png_embed["multimodal_embed_norm"]),
        **inner_zero_outputs(model, params, images[:3]),
    )

    # a bfloat16 leaf and a leaf in flax's chunked form (chunks above MAX_CHUNK_SIZE bytes; 2**30 in a release)
    serialization.MAX_CHUNK_SIZE = 16
    leaves = {
        "half": jnp.asarray(rng.normal(size=(3, 4)), jnp.bfloat16),
        "block": {"big": np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7},
    }
    (HERE / "flax_leaves.msgpack").write_bytes(serialization.msgpack_serialize(leaves))
    np.savez(
        HERE / "flax_leaves.npz",
        half=np.asarray(leaves["half"], np.float32),
        big=leaves["block"]["big"],
    )
    print("jax", jax.__version__, "flax", __import__("flax").__version__)


if __name__ == "__main__":
    main()
