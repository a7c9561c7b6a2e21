"""WeiCom (Psomas et al., IGARSS 2024; the RS-CIR benchmark paper Sec. 3.3): the Gaussian CDFs of each query's
standardised text and image similarities, fused with weight λ. Scored as −log(1 − s), which keeps the top of the
ranking distinct where float32 Φ rounds to 1. See docs/retrieval.md, "Methods and hyperparameters"."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from retrieval.data import as_numpy
from retrieval.methods.base import Buffers, Method, MethodContext, Prepared, distinct_rows, dot_scores


@dataclass(frozen=True)
class WeiComConfig:
    lam: float = 0.5  # modality weight: 0 = image only, 1 = text only (the RS-CIR benchmark paper: 0.5 in the main tables)

    def __post_init__(self):
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"weicom lambda must be in [0, 1], got {self.lam}")


Z_FLOAT32 = (-3.0, 12.0)  # z range where float32 erfc gives distinct, accurate upper tails


def standardise(sims: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Write z = (sims − mean) / std per row into `z` (float32, like `sims`; 0 where the row has no spread)
    and return the row means and unbiased stds in float64."""
    n = sims.shape[1]
    mean = sims.mean(axis=1, keepdims=True, dtype=np.float64)
    np.multiply(sims, sims, out=z)  # z holds the squares until the standardised values overwrite them
    var = z.mean(axis=1, keepdims=True, dtype=np.float64) - mean**2
    std = np.sqrt(np.clip(var, 0, None) * n / max(n - 1, 1))
    scale = np.maximum(std, 1e-30).astype(np.float32)
    np.subtract(sims, mean.astype(np.float32), out=z)
    np.divide(z, scale, out=z)
    z[~(std > 0)[:, 0]] = 0.0
    return mean, std


def weicom_fusion(
    s_txt: np.ndarray, s_img: np.ndarray, out: np.ndarray, *, lam: float, buffers: Buffers
) -> np.ndarray:
    """Write into `out` the (B, N) float32 −log(1 − s_WC) of the two (B, N) similarity matrices, ordered as
    s_WC = λ Φ(z_text) + (1 − λ) Φ(z_image); the intermediates are `buffers`' (reused chunk after chunk)."""
    from scipy.special import erfc  # float32 in, float32 out (computed in double, rounded once)

    z = buffers.like("z", out)
    extreme, outside = buffers.like("extreme", out, bool), buffers.like("outside", out, bool)
    extreme[...] = False
    stats = []
    for w, sims in ((lam, s_txt), (1.0 - lam, s_img)):
        if w <= 0:
            continue
        mean, std = standardise(sims, z)
        stats.append((w, sims, mean, std))
        for bound, side in ((Z_FLOAT32[0], np.less), (Z_FLOAT32[1], np.greater)):
            side(z, np.float32(bound), out=outside)
            extreme |= outside
        np.multiply(z, np.float32(1 / math.sqrt(2.0)), out=z)
        erfc(z, out=z)
        np.multiply(z, np.float32(w * 0.5), out=z)  # this modality's share of the upper tail 1 − s_WC
        if len(stats) == 1:
            np.copyto(out, z)
        else:
            out += z
    np.maximum(out, np.float32(1e-38), out=out)
    np.log(out, out=out)
    np.negative(out, out=out)
    rows, cols = np.nonzero(extreme)
    if len(rows):
        upper64 = np.zeros(len(rows))
        for w, sims, mean, std in stats:
            z64 = (sims[rows, cols].astype(np.float64) - mean[rows, 0]) / np.maximum(std[rows, 0], 1e-300)
            upper64 += w * 0.5 * erfc(z64 / math.sqrt(2.0))
        out[rows, cols] = (-np.log(np.maximum(upper64, 1e-308))).astype(np.float32)
    return out


class WeiCom(Method):
    """Scores in numpy (a bundle's evaluation loads no torch); tensors from `retrieve` are read as arrays."""

    name, config_cls, takes_numpy = "weicom", WeiComConfig, True

    def prepare(self, ctx: MethodContext) -> Prepared:
        lam = self.config.lam
        database = as_numpy(ctx.database)
        copies = distinct_rows(database)  # copies of one item get one score (and one standardised value)
        text, image = (dot_scores(as_numpy(q), database, copies) for q in (ctx.query_text, ctx.query_image))
        buffers = Buffers()

        def score(rows: np.ndarray, out: np.ndarray) -> None:
            rows = as_numpy(rows)
            s_txt, s_img = buffers.like("text", out), buffers.like("image", out)
            text(rows, s_txt)
            image(rows, s_img)
            weicom_fusion(s_txt, s_img, out, lam=lam, buffers=buffers)

        return Prepared(score=score, width=database.shape[0])
