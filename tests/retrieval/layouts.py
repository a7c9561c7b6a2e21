"""Tiny synthetic benchmarks in each on-disk layout (images are small solid-colour PNGs; what matters is the file
structure and the annotations, which mirror the real releases)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from PIL import Image

COLOURS = [
    (200, 30, 30),
    (30, 200, 30),
    (30, 30, 200),
    (200, 200, 30),
    (30, 200, 200),
    (200, 30, 200),
    (90, 90, 90),
]


def image(path: Path, n: int = 0, size: int = 24) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    r, g, b = COLOURS[n % len(COLOURS)]
    Image.new("RGB", (size, size), (r, (g + 17 * n) % 256, b)).save(path)
    return str(path)


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    return path


def patterncom(root: Path) -> Path:
    """PatternNet with airplane (colour), bridge + overpass (context, merged into roadpass), residential."""
    classes = {
        "airplane": "airplane",
        "bridge": "bridge",
        "overpass": "overpass",
        "dense_residential": "denseresidential",
    }
    lines = []
    n = 0
    for folder, prefix in classes.items():
        for i in range(1, 5):
            rel = f"images/{folder}/{prefix}{i:03d}.png"
            image(root / rel, n)
            lines.append(f"{rel} {n} {folder}")
            n += 1
    (root / "patternnet.csv").write_text("\n".join(lines) + "\n")
    com = root / "PatternCom"
    write_csv(
        com / "color.csv",
        [
            ["airplane001.png", "color", "white"],
            ["airplane002.png", "color", "white"],
            ["airplane003.png", "color", "purple"],
            ["airplane004.png", "color", "gray"],
        ],
    )
    write_csv(
        com / "context.csv",
        [
            ["bridge001.png", "context", "concrete"],
            ["bridge002.png", "context", "water"],
            ["overpass001.png", "context", "concrete"],
            ["overpass002.png", "context", "water"],
        ],
    )
    for attribute in ("density", "existence", "quantity", "shape"):
        write_csv(
            com / f"{attribute}.csv",
            [
                ["denseresidential001.png", attribute, "dense"],
                ["denseresidential002.png", attribute, "sparse"],
            ],
        )
    return root


def xview2(root: Path, *, n_per_event: int = 2) -> Path:
    events = [
        ("hurricane-harvey", "post hurricane", "storm damaged area", "hurricane-affected region"),
        ("socal-fire", "post fire", "burned area", "fire-affected region"),
        ("midwest-flooding", "post flood", "flooded area", "flood-affected region"),
    ]
    rows = [["image", "query_default", "query_alt1", "query_alt2", "target"]]
    n = 0
    for event, *queries in events:
        for i in range(n_per_event):
            pre = f"test/images/{event}_{i:08d}_pre_disaster.png"
            post = f"test/images/{event}_{i:08d}_post_disaster.png"
            image(root / pre, n)
            image(root / post, n + 1)
            n += 2
            rows.append([pre, *queries, post])
    write_csv(root / "xview2_cir.csv", rows)
    return root


def icir(root: Path) -> Path:
    """Two instances, each with its own database; 'temple' has two texts."""
    db_rows, q_rows = [], []
    n = 0
    for inst, texts in (("temple", ["during sunset", "as a painting"]), ("plushie", ["on a t-shirt"])):
        for t in texts:
            for k in range(2):
                rel = f"database/{inst}_{t.replace(' ', '_')}_{k}.png"
                image(root / rel, n)
                n += 1
                db_rows.append([rel, t, inst])
            q = f"query/{inst}_{t.replace(' ', '_')}.png"
            image(root / q, n)
            n += 1
            q_rows.append([q, t, inst])
        for k in range(3):  # hard negatives of the instance
            rel = f"database/{inst}_hn_{k}.png"
            image(root / rel, n)
            n += 1
            db_rows.append([rel, "", inst])
    write_csv(root / "query_files.csv", q_rows)
    write_csv(root / "database_files.csv", db_rows)
    return root


def edir(root: Path) -> Path:
    gallery = []
    records = []
    for i, (cat, sub) in enumerate(
        [("attribute", "color"), ("attribute", "material"), ("object", "addition")]
    ):
        ref, tgt, neg = f"images/ref_{i}.png", f"images/tgt_{i}.png", f"images/neg_{i}.png"
        for j, p in enumerate((ref, tgt, neg)):
            image(root / p, 3 * i + j)
        gallery += [ref, tgt, neg]
        records.append(
            {
                "id": f"q{i}",
                "reference": ref,
                "text": f"make it {sub}",
                "target": tgt,
                "category": cat,
                "subcategory": sub,
            }
        )
    (root / "gallery.txt").write_text("\n".join(gallery) + "\n")
    (root / "edir.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return root


def circo(root: Path) -> Path:
    images = []
    for i in range(6):
        name = f"{i:012d}.jpg"
        p = root / "COCO2017_unlabeled" / "unlabeled2017" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 16), COLOURS[i % 7]).save(p, format="JPEG")
        images.append({"file_name": name, "id": 100 + i})
    info = root / "COCO2017_unlabeled" / "annotations" / "image_info_unlabeled2017.json"
    info.parent.mkdir(parents=True, exist_ok=True)
    info.write_text(json.dumps({"images": images}))
    ann = [
        {
            "reference_img_id": 100,
            "target_img_id": 101,
            "relative_caption": "has two dogs",
            "shared_concept": "a dog",
            "gt_img_ids": [101, 102],
            "id": 0,
            "semantic_aspects": ["cardinality"],
        },
        {
            "reference_img_id": 103,
            "target_img_id": 104,
            "relative_caption": "at night",
            "shared_concept": "a street",
            "gt_img_ids": [104],
            "id": 1,
            "semantic_aspects": ["viewpoint", "addition"],
        },
    ]
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "annotations" / "val.json").write_text(json.dumps(ann))
    return root


def cirr(root: Path) -> Path:
    names = [f"dev-{i}-0-img{i % 2}" for i in range(5)]
    split = {n: f"./dev/{n}.png" for n in names}
    for i, n in enumerate(names):
        image(root / "dev" / f"{n}.png", i)
    caps = [
        {
            "pairid": 1,
            "reference": names[0],
            "target_hard": names[1],
            "target_soft": {names[1]: 1.0},
            "caption": "show two",
            "img_set": {"id": 1, "members": names[:3]},
        },
        {
            "pairid": 2,
            "reference": names[2],
            "target_hard": names[3],
            "target_soft": {names[3]: 1.0},
            "caption": "fewer",
            "img_set": {"id": 2, "members": names[2:]},
        },
    ]
    (root / "captions").mkdir(parents=True, exist_ok=True)
    (root / "image_splits").mkdir(parents=True, exist_ok=True)
    (root / "captions" / "cap.rc2.val.json").write_text(json.dumps(caps))
    (root / "image_splits" / "split.rc2.val.json").write_text(json.dumps(split))
    return root


def fashioniq(root: Path) -> Path:
    n = 0
    for cat in ("dress", "shirt"):
        asins = [f"B{cat[:2].upper()}{i:04d}" for i in range(4)]
        for a in asins:
            image(root / "images" / f"{a}.png", n)
            n += 1
        caps = [
            {"target": asins[1], "candidate": asins[0], "captions": ["is red.", "shorter sleeves?"]},
            {"target": asins[3], "candidate": asins[2], "captions": ["is blue", "fit and flare"]},
        ]
        (root / "captions").mkdir(parents=True, exist_ok=True)
        (root / "image_splits").mkdir(parents=True, exist_ok=True)
        (root / "captions" / f"cap.{cat}.val.json").write_text(json.dumps(caps))
        (root / "image_splits" / f"split.{cat}.val.json").write_text(json.dumps(asins))
    return root
