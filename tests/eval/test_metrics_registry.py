"""The metric registry: frozen entries, no silent overrides, helpful unknown-name errors, no heavy imports."""

import dataclasses
import subprocess
import sys

import pytest

from eval.metrics import METRICS, MetricEntry, build_metric, get_metric_info, list_metrics, parse_metric_names
from recon_score.registry import UnknownNameError

EXPECTED = {
    "bleu1",
    "bleu2",
    "bleu3",
    "bleu4",
    "meteor",
    "rouge",
    "cider",
    "spice",
    "clipscore",
    "refclipscore",
    "recon_score",
    "pacscore",
    "refpacscore",
    "longclipscore",
    "reflongclipscore",
    "cyclereward",
    "fleur",
    "reffleur",
}
IMAGE_FREE = {"bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge", "cider", "spice"}
REFERENCE_FREE = {"clipscore", "recon_score", "pacscore", "longclipscore", "cyclereward", "fleur"}


def test_every_metric_of_the_issue_is_registered_with_its_needs():
    infos = {m.name: m for m in list_metrics()}
    assert set(infos) == EXPECTED
    assert all(m.higher_is_better for m in infos.values())
    assert {n for n, m in infos.items() if m.needs_images} == EXPECTED - IMAGE_FREE
    assert {n for n, m in infos.items() if not m.needs_references} == REFERENCE_FREE
    with pytest.raises(dataclasses.FrozenInstanceError):
        infos["cider"].higher_is_better = False
    assert isinstance(get_metric_info("cider"), MetricEntry)


def test_every_entry_loads_its_class_and_the_class_finds_its_entry():
    for name, entry in METRICS.items():
        cls = entry.load()
        assert cls.__new__(cls).info is entry, name
    assert get_metric_info("cider").load().__name__ == "CIDEr"
    assert "long_text" in get_metric_info("pacscore").options and get_metric_info("cider").options == ()


def test_names_are_parsed_and_checked():
    assert parse_metric_names(" BLEU4, cider,bleu4,,") == ["bleu4", "cider"]
    with pytest.raises(UnknownNameError, match="did you mean 'meteor'"):
        parse_metric_names("meteorr")
    with pytest.raises(UnknownNameError, match="known: bleu1"):
        build_metric("nope")


def test_importing_the_registry_loads_no_torch_and_starts_no_java():
    code = "import sys, eval.metrics; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "False", r.stderr
