"""Each method on planted features where the right answer is known; sum/product equal their formulas; WeiCom's
extremes equal the unimodal rankings; BASIC's and FreeDom's pieces checked by hand."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from recon_score.errors import InputError
from recon_score.registry import UnknownNameError
from retrieval.data import EvalData
from retrieval.errors import MethodUnavailableError
from retrieval.evaluate import evaluate
from retrieval.methods import METHODS, Input, build_method
from retrieval.methods.base import Buffers, MethodContext, Resources, dot_scores
from retrieval.methods.basic import contrastive_projection
from retrieval.methods.freedom import frequent_words, proxy_features
from retrieval.methods.weicom import weicom_fusion

D = 16


def unit(*components: tuple[int, float]) -> torch.Tensor:
    v = torch.zeros(D)
    for i, x in components:
        v[i] = x
    return F.normalize(v, dim=0)


def random_unit(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(n, D, generator=g), dim=-1)


def ctx(q_img, q_txt, db, resources=None) -> MethodContext:
    return MethodContext(q_img, q_txt, db, torch.arange(q_img.shape[0]), resources or Resources())


def ranks(scores: torch.Tensor) -> torch.Tensor:
    return torch.sort(scores, dim=1, descending=True, stable=True).indices


@pytest.fixture(scope="module")
def planted() -> EvalData:
    """Axis 0 = the reference's object, axis 1 = the requested attribute. Item 0 has both (the positive),
    items 1-3 only the object, items 4-6 only the attribute, items 7+ noise."""
    g = torch.Generator().manual_seed(1)
    noise = lambda n: 0.15 * torch.randn(n, D, generator=g)  # noqa: E731
    both = torch.zeros(1, D)
    both[0, 0], both[0, 1] = 1.0, 1.0
    obj = torch.zeros(3, D)
    obj[:, 0] = 1.0
    attr = torch.zeros(3, D)
    attr[:, 1] = 1.0
    rest = torch.zeros(20, D)
    rest[:, 2:] = torch.randn(20, D - 2, generator=g)
    db = F.normalize(torch.cat([both, obj, attr, rest]) + noise(27), dim=-1)
    q_img = F.normalize(torch.tensor([[1.0] + [0.0] * (D - 1)]) + noise(1), dim=-1)
    q_txt = F.normalize(torch.tensor([[0.0, 1.0] + [0.0] * (D - 2)]) + noise(1), dim=-1)
    return EvalData(q_img, q_txt, db, torch.tensor([[0, 0]]), ["g"]).validate()


def test_a_bundle_runs_the_methods_whose_inputs_it_holds():
    """The methods `retrieve-eval` runs on a bundle alone follow from their inputs (BASIC's text encoder is
    optional: contextualisation is off on a bundle)."""
    on_bundle = {n for n, m in METHODS.items() if m.runs_on_bundle}
    assert on_bundle == {"text", "image", "sum", "product", "weicom", "basic"}
    assert Input.TEXT_ENCODER in METHODS["basic"].optional and Input.CORPORA in METHODS["basic"].inputs
    assert "--corpus-pos/--corpus-neg" in METHODS["basic"].needs()
    assert "--checkpoint searle=PATH" in METHODS["searle"].needs()


def test_registry_lists_every_method():
    names = set(METHODS)
    assert {"text", "image", "sum", "product", "weicom", "basic", "freedom", "cirevl"} <= names
    assert {"pic2word", "searle", "compodiff", "magiclens"} <= names
    assert METHODS["freedom"].linear and not METHODS["product"].linear
    with pytest.raises(UnknownNameError, match="unknown retrieval method 'weicom2' \\(did you mean 'weicom'"):
        build_method("weicom2")
    with pytest.raises(InputError, match="no hyperparameter 'lambda'; its hyperparameters are: lam"):
        build_method("weicom", {"lambda": "0.3"})
    with pytest.raises(InputError, match="must be in"):
        build_method("weicom", {"lam": "1.5"})
    with pytest.raises(InputError, match=r"freedom\.k expects int"):
        build_method("freedom", {"k": "many"})
    assert build_method("weicom", {"lam": "0.3"}).config.lam == 0.3
    assert build_method("basic", {"harris": "false", "qe_k": "5"}).config.qe_k == 5


def test_sum_and_product_rank_exactly_as_their_formulas():
    q_img, q_txt, db = random_unit(5, 0), random_unit(5, 1), random_unit(50, 2)
    s_img, s_txt = q_img @ db.T, q_txt @ db.T
    rows = torch.arange(5)
    scores = lambda name, sets=None: torch.as_tensor(  # noqa: E731
        build_method(name, sets).prepare(ctx(q_img, q_txt, db)).scores(rows)
    )
    got_sum = scores("sum")
    torch.testing.assert_close(got_sum, s_img + s_txt)
    assert torch.equal(ranks(got_sum), ranks(s_img + s_txt))
    assert torch.equal(scores("product"), s_img * s_txt)
    assert torch.equal(scores("product", {"rectify": "true"}), s_img.clamp(min=0) * s_txt.clamp(min=0))
    assert torch.equal(scores("text"), s_txt)
    assert torch.equal(scores("image"), s_img)


def test_weicom_extremes_equal_the_unimodal_rankings():
    q_img, q_txt, db = random_unit(8, 3), random_unit(8, 4), random_unit(400, 5)
    rows = torch.arange(8)
    image_only = ranks(q_img @ db.T)
    text_only = ranks(q_txt @ db.T)
    at0 = build_method("weicom", {"lam": "0"}).prepare(ctx(q_img, q_txt, db)).scores(rows)
    at1 = build_method("weicom", {"lam": "1"}).prepare(ctx(q_img, q_txt, db)).scores(rows)
    assert torch.equal(ranks(torch.as_tensor(at0)), image_only)  # WeiCom scores in numpy
    assert torch.equal(ranks(torch.as_tensor(at1)), text_only)


def weicom_scores(q_img, q_txt, database, *, lam: float) -> np.ndarray:
    """(B, N) float32 WeiCom scores of queries (B, D) against `database` (N, D), as `WeiCom` computes them."""
    q_img, q_txt, database = (t.numpy() for t in (q_img, q_txt, database))
    rows = np.arange(q_img.shape[0])
    s_txt, s_img = (np.empty((len(rows), database.shape[0]), dtype=np.float32) for _ in range(2))
    for q, sims in ((q_txt, s_txt), (q_img, s_img)):
        dot_scores(q, database)(rows, sims)
    return weicom_fusion(s_txt, s_img, np.empty_like(s_txt), lam=lam, buffers=Buffers())


def test_weicom_keeps_the_ranking_distinct_where_float32_cdf_saturates():
    """Items 9 and 10 standard deviations above the mean: float32 Φ gives both exactly 1.0, so the authors'
    float32 fusion ties them; ours keeps them apart. Items 4 and 5 sd below the mean stay apart too."""
    sims = torch.zeros(1, 2000)
    sims[0, :1000], sims[0, 1000:1998] = 0.01, -0.01
    sims[0, 1998], sims[0, 1999] = 0.09, 0.1
    z = (sims - sims.mean()) / sims.std()
    assert (0.5 * (1 + torch.erf(z[0, 1998:] / 2**0.5))).eq(1.0).all()  # the float32 CDF ties them
    database = torch.zeros(2000, D)  # item i has cosine sims[i] with e0
    database[:, 0], database[:, 1] = sims[0], (1 - sims[0] ** 2).sqrt()
    text = unit((2, 1.0)).unsqueeze(0)  # unused at lambda = 0
    top = weicom_scores(unit((0, 1.0)).unsqueeze(0), text, database, lam=0.0)
    assert top.dtype == np.float32 and top[0, 1999] > top[0, 1998] > top[0, 0]
    sims[0, 1998], sims[0, 1999] = -0.04, -0.05
    database[:, 0], database[:, 1] = sims[0], (1 - sims[0] ** 2).sqrt()
    bottom = weicom_scores(unit((0, 1.0)).unsqueeze(0), text, database, lam=0.0)
    assert bottom[0, 1998] > bottom[0, 1999] and len(np.unique(bottom)) == 4


def test_each_method_finds_the_planted_positive(planted):
    """Only the composed methods rank item 0 (object AND attribute) first; unimodal ones rank a decoy first."""
    ap = {}
    for name in ("text", "image", "sum", "product", "weicom"):
        ap[name] = evaluate(build_method(name), planted).per_query["ap"][0]
    assert ap["sum"] == 1.0 and ap["product"] == 1.0 and ap["weicom"] == 1.0
    assert ap["image"] < 1.0 and ap["text"] < 1.0


def test_basic_with_every_component_off_is_the_rectified_product():
    q_img, q_txt, db = random_unit(6, 6), random_unit(6, 7), random_unit(60, 8)
    off = {
        k: "false"
        for k in (
            "centering",
            "projection",
            "query_expansion",
            "min_normalization",
            "harris",
            "contextualize",
        )
    }
    got = build_method("basic", off).prepare(ctx(q_img, q_txt, db)).scores(torch.arange(6))
    got = torch.as_tensor(got)  # BASIC scores in numpy
    torch.testing.assert_close(got, (q_img @ db.T).clamp(min=0) * (q_txt @ db.T).clamp(min=0))
    harris = (
        build_method("basic", {**off, "harris": "true"})
        .prepare(ctx(q_img, q_txt, db))
        .scores(torch.arange(6))
    )
    si, st = (q_img @ db.T).clamp(min=0), (q_txt @ db.T).clamp(min=0)
    torch.testing.assert_close(torch.as_tensor(harris), st * si - 0.1 * (st + si) ** 2)


def test_contrastive_projection_keeps_object_directions_and_drops_style_ones():
    """Positive corpus spans axes 0-2, negative corpus axes 3-4: P keeps 0-2 and removes 3-4 (up to the
    all-ones direction that the authors' "+ 1e-5" on every entry of C adds with a tiny positive eigenvalue)."""
    g = torch.Generator().manual_seed(2)
    pos = torch.zeros(200, D)
    pos[:, :3] = torch.randn(200, 3, generator=g)
    neg = torch.zeros(100, D)
    neg[:, 3:5] = torch.randn(100, 2, generator=g)
    proj, k = contrastive_projection(pos - pos.mean(0), neg - pos.mean(0), alpha=0.2, n_components=250)
    proj = torch.as_tensor(proj)  # computed in numpy
    assert proj[0] @ unit((0, 1.0)) == pytest.approx(1.0, abs=1e-3)
    assert (unit((3, 1.0)) @ proj).norm() < 0.05 and (unit((4, 1.0)) @ proj).norm() < 0.05
    _, k_energy = contrastive_projection(pos - pos.mean(0), neg - pos.mean(0), alpha=0.2, n_components=0.5)
    assert 1 <= k_energy <= 3 < k


def test_basic_full_pipeline_finds_the_planted_positive(planted):
    r = Resources(corpus_pos=random_unit(64, 9), corpus_neg=random_unit(32, 10))
    res = evaluate(build_method("basic", {"contextualize": "false"}), planted, resources=r)
    assert res.per_query["ap"][0] == 1.0
    assert any("image mean = the database mean" in n for n in res.notes)
    with pytest.raises(MethodUnavailableError, match="positive and negative text corpora"):
        evaluate(build_method("basic", {"contextualize": "false"}), planted)
    with pytest.raises(MethodUnavailableError, match="for text contextualisation the text encoder"):
        evaluate(build_method("basic"), planted, resources=r)


def test_freedom_word_frequencies_and_tie_order():
    """Rows of (proxy x word-rank) indices; counts 2/2/1 -> words 5 and 3 tie, 5 appears first."""
    idx, w = frequent_words(torch.tensor([[5, 3, 7, 3, 5, 9]]), vocab_size=10, m=3)
    assert idx[0].tolist() == [5, 3, 7] and w[0].tolist() == [1.0, 1.0, 0.5]
    idx, w = frequent_words(torch.tensor([[1, 1]]), vocab_size=4, m=3)
    assert idx[0, 0].item() == 1 and w[0].tolist() == [1.0, 0.0, 0.0]


def test_freedom_adds_the_query_when_it_is_not_in_the_database():
    db = torch.eye(D)[:5]
    inside = torch.eye(D)[:1]  # identical to db[0]
    outside = F.normalize(torch.eye(D)[:1] + torch.eye(D)[1:2], dim=-1)
    p_in = proxy_features(inside, db, k=3, self_threshold=0.98)
    p_out = proxy_features(outside, db, k=3, self_threshold=0.98)
    assert torch.equal(p_in[0, 0], db[0]) and p_out.shape == (1, 3, D)
    assert torch.equal(p_out[0, 0], outside[0]) and not any(torch.equal(p_out[0, 0], x) for x in db)


def test_freedom_composes_words_from_the_image_with_the_text():
    """Vocabulary word vectors lie on database axes; the fake text tower maps '{text} {word}' to the sum of
    the text's and the word's axes, so the composed query points at the item having both."""
    words = ["airplane", "tree", "lake", "road"]
    axes = {"airplane": 0, "tree": 2, "lake": 3, "road": 4, "purple": 1}
    vocab = torch.stack([unit((axes[w], 1.0)) for w in words])

    def encode(texts: list[str]) -> torch.Tensor:
        return torch.stack([F.normalize(sum(unit((axes[t], 1.0)) for t in s.split()), dim=0) for s in texts])

    db = torch.stack(
        [unit((0, 1.0), (1, 1.0)), unit((0, 1.0)), unit((1, 1.0)), unit((2, 1.0)), unit((0, 1.0), (2, 0.2))]
    )
    data = EvalData(
        unit((0, 1.0)).unsqueeze(0), encode(["purple"]), db, torch.tensor([[0, 0]]), ["g"]
    ).validate()
    r = Resources(texts=["purple"], encode_texts=encode, vocabulary=vocab, vocabulary_texts=words)
    res = evaluate(build_method("freedom", {"k": "2", "n": "1", "m": "2"}), data, resources=r)
    assert res.per_query["ap"][0] == 1.0
    assert res.details[0].startswith("airplane (1.00)")
    with pytest.raises(MethodUnavailableError, match="text encoder at query time"):
        evaluate(build_method("freedom"), data)


def test_cirevl_captions_once_per_reference_and_searches_the_rewrite():
    axes = {"red": 0, "blue": 1, "car": 2, "boat": 3}

    def encode(texts):
        return torch.stack([F.normalize(sum(unit((axes[t], 1.0)) for t in s.split()), dim=0) for s in texts])

    calls = []

    def captioner(images):
        calls.append(len(images))
        return ["red car"] * len(images)

    def rewriter(captions, texts):
        return [c.replace("red", t) for c, t in zip(captions, texts)]

    db = torch.stack([unit((1, 1.0), (2, 1.0)), unit((0, 1.0), (2, 1.0)), unit((1, 1.0), (3, 1.0))])
    q = unit((0, 1.0), (2, 1.0)).unsqueeze(0).repeat(2, 1)
    data = EvalData(q, encode(["blue", "blue"]), db, torch.tensor([[0, 0], [1, 0]]), ["g", "g"]).validate()
    r = Resources(
        texts=["blue", "blue"],
        reference_keys=["same.png", "same.png"],
        load_reference=lambda i: object(),
        encode_texts=encode,
        captioner=captioner,
        rewriter=rewriter,
    )
    res = evaluate(build_method("cirevl"), data, resources=r)
    assert res.per_query["ap"].tolist() == [1.0, 1.0]
    assert calls == [1] and res.details[0] == "red car -> blue car"
    with pytest.raises(MethodUnavailableError, match="a captioner"):
        evaluate(build_method("cirevl"), data, resources=Resources(encode_texts=encode))


def _freedom_reference(q_img, db, vocab, words, texts, encode, *, kappa, ni, miu):
    """NikosEfth/freedom utils_retrieval.calculate_rankings, re-derived: one self-feature decision for the
    whole query set, keep_k_most_frequent (dict counts, Python's stable sort), text_to_multi (word + " " +
    text), weights count / max count, weighted sum of the encoded compositions."""
    sim = q_img @ db.T
    ranks_img = torch.topk(sim, kappa, dim=1).indices
    feats = db[ranks_img]
    if torch.min(torch.max(sim, 1)[0]).item() < 0.98:
        feats = torch.cat((q_img.unsqueeze(1), feats[:, :-1, :]), 1)
    top = torch.topk(feats @ vocab.T, ni, dim=2).indices.tolist()
    out = []
    for qi, per_query in enumerate(top):
        counts: dict[str, int] = {}
        for neighbour in per_query:
            for w in neighbour:
                counts[words[w]] = counts.get(words[w], 0) + 1
        common = sorted(counts, key=lambda x: counts[x], reverse=True)[:miu]
        weights = torch.tensor([counts[x] / max(max(counts[c] for c in common), 1e-4) for x in common])
        composed = encode([w + " " + texts[qi] for w in common])
        out.append((composed * weights[:, None]).sum(0))
    return torch.stack(out)


@pytest.mark.parametrize("mix", [False, True])
def test_freedom_defaults_match_the_authors_code(mix):
    """Default template and the 'batch' self-proxy rule against the authors' procedure; with a query set that
    mixes in-database and outside queries, 'query' (per query) differs from it and 'batch' does not."""
    g = torch.Generator().manual_seed(3)
    db = F.normalize(torch.randn(30, D, generator=g), dim=-1)
    q_img = db[:4].clone()
    if mix:
        q_img[2] = F.normalize(torch.randn(D, generator=g), dim=-1)
    words = [f"w{i}" for i in range(12)]
    vocab = F.normalize(torch.randn(12, D, generator=g), dim=-1)
    table: dict[str, torch.Tensor] = {}

    def encode(texts):
        for t in texts:
            if t not in table:
                seed = sum((i + 1) * ord(c) for i, c in enumerate(t))
                table[t] = F.normalize(torch.randn(D, generator=torch.Generator().manual_seed(seed)), dim=0)
        return torch.stack([table[t] for t in texts])

    texts = ["red", "two", "red", "dense"]
    r = Resources(texts=texts, encode_texts=encode, vocabulary=vocab, vocabulary_texts=words)
    want = _freedom_reference(q_img, db, vocab, words, texts, encode, kappa=4, ni=3, miu=3)
    c = ctx(q_img, encode(texts), db, r)
    batch = build_method("freedom", {"k": "4", "n": "3", "m": "3", "self_proxy": "batch"}).prepare(c)
    torch.testing.assert_close(batch.query_vectors, want, atol=1e-5, rtol=0)
    per_query = build_method("freedom", {"k": "4", "n": "3", "m": "3"}).prepare(c).query_vectors
    gap = (per_query - want).abs().amax(dim=1)
    if mix:  # the in-database queries differ (the authors add them to their own proxies); the outsider agrees
        assert gap[[0, 1, 3]].min() > 1e-4 and gap[2] < 1e-5
    else:
        assert gap.max() < 1e-5


def test_cirevl_prompt_follows_cirevls_layout_and_names_patterncoms_six_attributes():
    from retrieval.methods.cirevl import REWRITE_PROMPTS, edited_description

    cfg = build_method("cirevl").config
    assert cfg.rewrite_prompt == "patterncom"
    prompt = cfg.rewrite_template.format(caption="an airport with white planes", text="gray")
    # CIReVL's layout (src/prompts.py + its query format): content, instruction, answer after the prefix
    assert "Image Content: an airport with white planes\nInstruction: gray\nEdited Description:" in prompt
    for attribute in ("color", "context", "density", "existence", "quantity", "shape"):
        assert attribute in REWRITE_PROMPTS["patterncom"]
    assert edited_description("Edited Description: an airport with gray planes\nmore") == (
        "an airport with gray planes"
    )
    assert build_method("cirevl", {"rewrite_prompt": "{caption} / {text}"}).config.rewrite_template == (
        "{caption} / {text}"
    )
    with pytest.raises(InputError, match="must contain"):
        build_method("cirevl", {"rewrite_prompt": "no slots"})
