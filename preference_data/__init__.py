"""Human-judgment sets (rankings, ratings) as one tidy pandas table; generated robustness sets (the ReconScore paper's Tables 4 and 5).

Every loader returns one row per human judgment with the columns in `schema.COLUMNS`: image, candidate,
references, judgment, judgment_kind, rater, model, candidate_id, source. Pure data loading: this package imports
nothing from recon_score, describer, retrieval or eval; the registry of formats with their facts is
eval.preferences.
"""

from __future__ import annotations

from preference_data.flickr8k import load_flickr8k_crowdflower, load_flickr8k_expert
from preference_data.generic import load_scores_csv
from preference_data.ranking import load_ranking
from preference_data.references import load_references
from preference_data.schema import COLUMNS, JUDGMENT_KINDS, PreferenceFormatError, higher_is_better
from preference_data.thumb import load_thumb

__all__ = [
    "COLUMNS",
    "JUDGMENT_KINDS",
    "PreferenceFormatError",
    "higher_is_better",
    "load_flickr8k_crowdflower",
    "load_flickr8k_expert",
    "load_ranking",
    "load_references",
    "load_scores_csv",
    "load_thumb",
]
