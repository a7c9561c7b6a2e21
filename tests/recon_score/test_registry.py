"""The one registry shape: entries by name, lazy targets, one unknown-name error with a hint, no overrides."""

import subprocess
import sys
from dataclasses import dataclass

import pytest

from recon_score.registry import Entry, Registry, UnknownNameError


@dataclass(frozen=True)
class Thing(Entry):
    size: int = 0


def test_lookup_listing_and_lazy_targets():
    things = Registry("thing", (Thing("alpha", "json:dumps", "first", 1), Thing("beta", "json", "second")))
    assert list(things) == ["alpha", "beta"] and len(things) == 2 and "alpha" in things
    assert things["alpha"].size == 1 and things.load("alpha")([1]) == "[1]"
    assert things.load("beta").__name__ == "json"  # a module target without ':attribute'
    assert things.get("gamma") is None


def test_unknown_name_is_one_error_with_a_hint():
    things = Registry("thing", (Thing("alpha", "json:dumps", ""),), see="`tool things` lists them.")
    with pytest.raises(
        UnknownNameError, match=r"unknown thing 'alpah' \(did you mean 'alpha'\?\); known: alpha\. `tool"
    ):
        things["alpah"]
    with pytest.raises(KeyError):  # also a KeyError and a ValueError, as the lookups it replaces raised
        things["x"]
    with pytest.raises(ValueError):
        things["x"]
    assert str(things.error("x")).startswith("unknown thing 'x'")


def test_a_name_given_twice_is_an_error():
    with pytest.raises(ValueError, match="thing 'alpha' is registered twice"):
        Registry("thing", (Thing("alpha", "json", ""), Thing("alpha", "os", "")))


def test_listing_every_registry_imports_no_backend():
    """Names, help texts and facts of every registry come without open_clip, scipy or a loader module."""
    code = (
        "import sys\n"
        "from eval.metrics import METRICS\n"
        "from eval.preferences import FORMATS\n"
        "from eval.datasets import DATASETS\n"
        "from retrieval.methods import METHODS\n"
        "from retrieval.datasets import BENCHMARKS\n"
        "from recon_score.encoders import FAMILIES\n"
        "from recon_score.presets import PRESETS\n"
        "from recon_score.synthetic import MODELS\n"
        "rows = [(e.name, e.help) for r in (METRICS, FORMATS, DATASETS, METHODS, BENCHMARKS, FAMILIES, MODELS) "
        "for e in r.values()]\n"
        "heavy = [m for m in ('open_clip', 'dreamsim', 'scipy', 'retrieval.methods.basic', 'eval.metrics.clip') "
        "if m in sys.modules]\n"
        "print(len(rows) > 50, heavy)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.stdout.strip() == "True []", r.stderr
