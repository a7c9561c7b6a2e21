"""BLEU-1..4, ROUGE-L and CIDEr-D per caption, by pycocoevalcap's own scorers on PTB-tokenised text (the COCO
caption protocol, also used by Hessel et al. 2021 for Flickr8K). See docs/correlate.md for each one's settings;
CIDEr's IDF is over the scored corpus, so score a whole set at once."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eval.metrics.base import CaptionBatch, Metric, MetricOutput, scatter, unique_pairs

_NO_REFS = "rows without references are NaN"


def _bleu_all(batch: CaptionBatch) -> tuple[np.ndarray, np.ndarray, list[float] | None]:
    """(4, n) BLEU-1..4 for every row (NaN without references), from one BleuScorer pass over distinct pairs, and
    the corpus-level BLEU-1..4 of all scored rows (what COCO evaluation reports for a test set)."""

    def run():
        from pycocoevalcap.bleu.bleu import Bleu

        cands, refs = batch.tokenized()
        rows = batch.reference_rows()
        pairs, inverse = unique_pairs([cands[i] for i in rows], [refs[i] for i in rows])
        out = np.full((4, len(batch)), np.nan)
        corpus = None
        if pairs:
            gts = {k: list(r) for k, (_, r) in enumerate(pairs)}
            res = {k: [c] for k, (c, _) in enumerate(pairs)}
            corpus, per = Bleu(4).compute_score(gts, res, verbose=0)
            per = np.asarray(per, dtype=float)  # (4, n_pairs)
            out[:, rows] = per[:, inverse]
            if len(pairs) < len(rows):  # duplicated rows weigh in the corpus statistics: recompute over rows
                gts = {k: list(refs[i]) for k, i in enumerate(rows)}
                res = {k: [cands[i]] for k, i in enumerate(rows)}
                corpus, _ = Bleu(4).compute_score(gts, res, verbose=0)
        return out, rows, corpus

    return batch.memo("bleu", run)


class _Bleu(Metric):
    n = 4

    def score(self, batch: CaptionBatch) -> MetricOutput:
        values, rows, corpus = _bleu_all(batch)
        info = {"scored_rows": len(rows), "note": _NO_REFS}
        if corpus is not None:
            info["corpus"] = float(corpus[self.n - 1])  # corpus BLEU, not the mean of per-caption BLEU
        return MetricOutput(values[self.n - 1].copy(), info=info)

    def config(self) -> dict:
        return {"tokenizer": "PTB (pycocoevalcap)", "reference_length": "closest", "max_n": self.n}


class Bleu1(_Bleu):
    n = 1


class Bleu2(_Bleu):
    n = 2


class Bleu3(_Bleu):
    n = 3


class Bleu4(_Bleu):
    n = 4


class RougeL(Metric):
    def score(self, batch: CaptionBatch) -> MetricOutput:
        from pycocoevalcap.rouge.rouge import Rouge

        cands, refs = batch.tokenized()
        rows = batch.reference_rows()
        pairs, inverse = unique_pairs([cands[i] for i in rows], [refs[i] for i in rows])
        scorer = Rouge()
        per = np.array([scorer.calc_score([c], list(r)) for c, r in pairs], dtype=float)
        values = scatter(len(batch), rows, per[inverse] if len(pairs) else [])
        return MetricOutput(values, info={"scored_rows": len(rows), "note": _NO_REFS})

    def config(self) -> dict:
        return {"tokenizer": "PTB (pycocoevalcap)", "beta": 1.2}


class CIDEr(Metric):
    """CIDEr-D; its IDF is over the scored batch's references (one document per row, as pycocoevalcap), or over
    a fixed corpus set by `use_idf_corpus`, so a value does not depend on which rows share a batch."""

    _idf: tuple[dict, int] | None = None  # (document frequency of each n-gram, number of documents)

    def use_idf_corpus(self, references: Sequence[Sequence[str]]) -> None:
        """Fix the IDF to these documents' references (one document per entry, e.g. per image of an input set):
        describe's selection scores an image's candidates against the whole input set, never its batch."""
        from pycocoevalcap.cider.cider_scorer import CiderScorer

        from eval.metrics.ptb import ptb_tokenize

        docs = [list(rs) for rs in references if rs]
        flat = ptb_tokenize([r for rs in docs for r in rs])
        scorer, at = CiderScorer(n=4, sigma=6.0), 0
        for rs in docs:
            scorer += (None, flat[at : at + len(rs)])
            at += len(rs)
        scorer.compute_doc_freq()  # pycocoevalcap's own document frequencies
        self._idf = (dict(scorer.document_frequency), len(docs))

    def score(self, batch: CaptionBatch) -> MetricOutput:
        from pycocoevalcap.cider.cider_scorer import CiderScorer

        cands, refs = batch.tokenized()
        rows = batch.reference_rows()
        scorer = CiderScorer(n=4, sigma=6.0) if self._idf is None else _FixedIdfCider(*self._idf)
        for i in rows:  # every row is a document for the IDF, duplicates included (as pycocoevalcap)
            scorer += (cands[i], refs[i])
        per = scorer.compute_score()[1] if len(rows) else []
        values = scatter(len(batch), rows, per)
        documents = len(rows) if self._idf is None else self._idf[1]
        return MetricOutput(
            values,
            info={"scored_rows": len(rows), "idf_documents": documents, "note": _NO_REFS},
        )

    def config(self) -> dict:
        corpus = "the references of every scored row of this run (one document per row)"
        if self._idf is not None:
            corpus = f"the references of the {self._idf[1]} images of the input set (one document per image)"
        return {
            "variant": "CIDEr-D (pycocoevalcap: clipped counts, Gaussian length penalty sigma=6, x10)",
            "idf_corpus": corpus,
            "tokenizer": "PTB (pycocoevalcap)",
        }


class _Documents(list):
    """The scored rows, counted as the IDF corpus' documents: pycocoevalcap's `compute_cider` takes the IDF
    numerator log(N) from len(crefs) and iterates the rows."""

    def __init__(self, rows: list, documents: int):
        super().__init__(rows)
        self.documents = documents

    def __len__(self) -> int:
        return self.documents


class _FixedIdfCider:
    """pycocoevalcap's CIDEr-D scorer with the document frequencies of a fixed corpus instead of the rows'."""

    def __init__(self, document_frequency: dict, documents: int):
        from pycocoevalcap.cider.cider_scorer import CiderScorer

        self._scorer = CiderScorer(n=4, sigma=6.0)
        self._df, self._documents = document_frequency, documents

    def __iadd__(self, pair: tuple) -> _FixedIdfCider:
        self._scorer += pair
        return self

    def compute_score(self) -> tuple[float, np.ndarray]:
        from collections import defaultdict

        scorer = self._scorer
        scorer.document_frequency = defaultdict(float, self._df)
        rows = scorer.crefs
        scorer.crefs = _Documents(rows, max(self._documents, 1))
        try:
            per = np.array(scorer.compute_cider())
        finally:
            scorer.crefs = rows
        return float(per.mean()) if len(per) else 0.0, per
