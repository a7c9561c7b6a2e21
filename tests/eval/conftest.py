import pytest

from tests.eval.report_runs import build_runs


@pytest.fixture(scope="session")
def report_runs(tmp_path_factory, sample_dir):
    """One small run of every kind (tests/eval/report_runs.py), built once for the report and vocabulary tests."""
    return build_runs(tmp_path_factory.mktemp("report"), sample_dir)
