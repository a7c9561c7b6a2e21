"""Human-judgment sets (rankings, ratings) as one tidy pandas table (`schema.COLUMNS`, one row per judgment) and
generated robustness sets (the ReconScore paper's Tables 4 and 5). Pure data loading: it imports nothing from
the other packages; the registry of formats with their facts is eval.preferences.
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
