"""The registry of meta-evaluation benchmarks: the standard human-judgment sets caption metrics are reported on,
each with its loader, protocol, reference rule, split, image source, where its files come from, and the named
variants where papers differ (the first variant is the default: the one behind the most-cited numbers)."""

from __future__ import annotations

from dataclasses import dataclass

from recon_score.registry import Entry, Registry

KENDALL = "kendall"  # Kendall tau-b and tau-c over every (image, candidate, judgment) row (eval.kendall)
PAIRWISE = "pairwise"  # accuracy: share of pairs where the metric prefers the caption people preferred


@dataclass(frozen=True)
class Variant:
    name: str
    help: str


@dataclass(frozen=True)
class Benchmark(Entry):
    """`target` is the loader: `load(folder: Path, variant: str) -> tidy judgment table` (preference_data.schema
    columns; pairwise sets add `pair`, `category` and `draw`)."""

    folder: str  # DIR/<folder>/ under --data-root
    protocol: str  # KENDALL | PAIRWISE
    headline: str  # the published statistic: tau_b, tau_c or accuracy
    references: str  # the reference rule, in words
    split: str  # the split that is scored
    images: str  # "" when no metric needs them here; else where they come from
    files: tuple[str, ...]  # the local layout under DIR/<folder>/ (of the default variant)
    source: str  # where to get the files: the hub dataset id or the official release
    paper: str  # the benchmark's paper, by name
    variants: tuple[Variant, ...] = (Variant("default", "the official files and protocol"),)

    @property
    def default_variant(self) -> str:
        return self.variants[0].name

    def variant(self, name: str | None) -> str:
        """The variant called `name` (None: the default); an unknown name is one error listing the known ones."""
        if name is None:
            return self.default_variant
        known = [v.name for v in self.variants]
        if name not in known:
            from recon_score.registry import UnknownNameError

            raise UnknownNameError(f"{self.name} variant", name, known)
        return name


_L = "eval.meta_eval.loaders"
_B = Benchmark

BENCHMARKS: Registry[Benchmark] = Registry(
    "benchmark",
    (
        _B(
            "flickr8k-expert",
            f"{_L}:load_flickr8k_expert",
            "Flickr8K-Expert: 5,664 (image, caption) pairs x 3 expert ratings (1-4)",
            folder="flickr8k",
            protocol=KENDALL,
            headline="tau_c",
            references="the image's 5 Flickr8K captions; pairs whose candidate is one of them are dropped (158)",
            split="all (the 1,000 Flickr8K test images)",
            images="Flickr8k_Dataset/ (the Flickr8K image release), only for image metrics",
            files=("ExpertAnnotations.txt", "Flickr8k.token.txt"),
            source="the Flickr8K text release (Flickr8k_text.zip: ExpertAnnotations.txt, Flickr8k.token.txt)",
            paper="Flickr8K (Hodosh et al. 2013); protocol of CLIPScore",
        ),
        _B(
            "flickr8k-cf",
            f"{_L}:load_flickr8k_cf",
            "Flickr8K-CrowdFlower: 47,830 (image, caption) pairs, share of 'describes the image' votes",
            folder="flickr8k",
            protocol=KENDALL,
            headline="tau_b",
            references="the image's Flickr8K captions minus every caption rated for that image",
            split="all",
            images="Flickr8k_Dataset/ (the Flickr8K image release), only for image metrics",
            files=("CrowdFlowerAnnotations.txt", "Flickr8k.token.txt"),
            source="the Flickr8K text release (Flickr8k_text.zip: CrowdFlowerAnnotations.txt, Flickr8k.token.txt)",
            paper="Flickr8K (Hodosh et al. 2013); protocol of CLIPScore",
        ),
        _B(
            "thumb",
            f"{_L}:load_thumb",
            "THumB 1.0: 500 MSCOCO images x 5 systems, human score (P+R)/2 + penalties",
            folder="thumb",
            protocol=KENDALL,
            headline="tau_b",
            references="the image's MSCOCO captions minus the one scored as the Human system",
            split="MSCOCO Karpathy test (500 images)",
            images="COCO val2014 images, only for image metrics",
            files=("mscoco_THumB-1.0.jsonl", "mscoco_references.json"),
            source="github.com/jungokasai/THumB (mscoco/mscoco_THumB-1.0.jsonl, mscoco_references.json)",
            paper="THumB (Kasai et al. 2022)",
        ),
        _B(
            "composite",
            f"{_L}:load_composite",
            "Composite: correctness 1-5 of captions of 997 Flickr8K, 991 Flickr30K and 2,007 COCO images",
            folder="composite",
            protocol=KENDALL,
            headline="tau_c",
            references="the image's other captions as the file gives them",
            split="all",
            images="the Flickr8K, Flickr30K and COCO images the files name, only for image metrics",
            files=("composite.csv",),
            source="the processed CSV of the Polos repository (mt, refs, score, imgid); hub yuwd/Composite",
            paper="Composite (Aditya et al. 2015)",
            variants=(
                Variant("processed", "the processed CSV (mt, refs, score, imgid) Polos and DENEB score"),
            ),
        ),
        _B(
            "pascal50s",
            f"{_L}:load_pascal50s",
            "PASCAL-50S: 4,000 caption pairs of 1,000 images, 1,000 per category HC/HI/HM/MM",
            folder="pascal50s",
            protocol=PAIRWISE,
            headline="accuracy",
            references="48 of the image's 50 sentences: those the consensus triplets use (the 50 minus the "
            "pair's own human candidates, as the consensus file lists them)",
            split="all",
            images="VOC2010 JPEGImages/, only for image metrics",
            files=("pair_pascal.mat", "pascal50S.mat", "consensus_pascal.mat"),
            source="vrama91/cider (data/pair_pascal.mat, data/pascal50S.mat, data/consensus_pascal.mat)",
            paper="CIDEr (Vedantam et al. 2015)",
            variants=(
                Variant(
                    "5-refs", "5 of the 48 references drawn at random, accuracy averaged over 5 draws (PAC-S)"
                ),
                Variant("48-refs", "all 48 references, vote ties broken with seed 42 (Polos' loader)"),
            ),
        ),
        _B(
            "foil",
            f"{_L}:load_foil",
            "FOIL: COCO captions vs the same caption with one word replaced; the correct one must score higher",
            folder="foil",
            protocol=PAIRWISE,
            headline="accuracy",
            references="the image's COCO val2014 captions minus the correct caption: the first (1-ref) or four",
            split="test",
            images="COCO val2014 images, only for image metrics",
            files=("foilv1.0_test_2017.json", "captions_val2014.json"),
            source="FOIL-it (foilv1.0_test_2017.json) + COCO 2014 annotations (captions_val2014.json)",
            paper="FOIL it! (Shekhar et al. 2017)",
            variants=(
                Variant("4-refs", "four references per image"),
                Variant("1-ref", "one reference per image"),
            ),
        ),
        _B(
            "polaris",
            f"{_L}:load_polaris",
            "Polaris: 26,122 test captions with human scores (0-1)",
            folder="polaris",
            protocol=KENDALL,
            headline="tau_c",
            references="the row's refs",
            split="test",
            images="the parquet shards' `img` Image feature (CSV variant: images/ from images.tar.gz)",
            files=("data/test-*.parquet",),
            source="hub yuwd/Polaris (hf download yuwd/Polaris --repo-type dataset)",
            paper="Polos (Wada et al. 2024)",
            variants=(
                Variant("parquet", "the hub's parquet shards data/<split>-*.parquet"),
                Variant("csv", "the older polaris_<split>.csv (mt, refs, score, imgid)"),
            ),
        ),
        _B(
            "nebula",
            f"{_L}:load_nebula",
            "Nebula: 3,298 test captions with human scores",
            folder="nebula",
            protocol=KENDALL,
            headline="tau_c",
            references="the row's refs",
            split="test",
            images="the parquet shards' `image` Image feature",
            files=("data/test-*.parquet",),
            source="hub Ka2ukiMatsuda/Nebula; corrections: hub hiranohachiman/Spica in DIR/nebula/spica/",
            paper="DENEB (Matsuda et al. 2024)",
            variants=(
                Variant("original", "the released human scores"),
                Variant("spica", "human scores corrected by Spica (matched on file_name and mt)"),
            ),
        ),
        _B(
            "longcaparena",
            f"{_L}:load_longcaparena",
            "LongCap-Arena: long, dense captions rated for descriptiveness, relevance and fluency",
            folder="longcaparena",
            protocol=KENDALL,
            headline="tau_c",
            references="the row's refs",
            split="dci_test (one category per perspective: desc, rel, flu)",
            images="the parquet shards' `image` Image feature",
            files=(
                "data/dci_test.desc-*.parquet",
                "data/dci_test.rel-*.parquet",
                "data/dci_test.flu-*.parquet",
            ),
            source="hub Ka2ukiMatsuda/LongCap-Arena",
            paper="VELA (Matsuda et al. 2025)",
        ),
    ),
    see="See docs/meta-eval.md.",
)


def parse_benchmarks(spec: str) -> list[str]:
    """`all` or a comma-separated list of names -> the names, in registry order for `all`."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if names == ["all"]:
        return list(BENCHMARKS)
    for n in names:
        BENCHMARKS[n]  # an unknown name is one error with a hint
    if not names:
        from recon_score.errors import ReconScoreError

        raise ReconScoreError("--benchmarks is empty: give `all` or names such as flickr8k-expert,thumb")
    return list(dict.fromkeys(names))
