"""The user's layout and dependency direction: eval may import everything; describer, retrieval and
preference_data import recon_score (preference_data for its one text-file policy, `recon_score.textfiles`, rather
than a copy of it); recon_score imports none of the others."""

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("recon_score", "describer", "retrieval", "preference_data", "eval")
ALLOWED = {
    "recon_score": set(),
    "preference_data": {"recon_score"},  # recon_score.textfiles reads its files
    "describer": {"recon_score"},
    "retrieval": {"recon_score"},
    "eval": set(PACKAGES) - {"eval"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_dependency_direction(package):
    bad = {}
    for path in (REPO / package).rglob("*.py"):
        wrong = _imports(path) - ALLOWED[package] - {package}
        if wrong:
            bad[str(path.relative_to(REPO))] = sorted(wrong)
    assert not bad, f"{package} must not import {bad}"


def test_importing_packages_loads_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, recon_score, describer, retrieval, preference_data, eval; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.stdout.strip() == "False", out.stderr[-1000:]


@pytest.mark.parametrize("package", [*PACKAGES, "docs", "benchmarks"])
def test_papers_are_cited_by_name(package):
    """'seed 004' or 'issue 12' names nothing a user has: code, help, output and docs cite the papers by name."""
    import re

    jargon = re.compile(r"\bseed 00\d\b|\bissue #?\d+\b", re.I)
    bad = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted((REPO / package).rglob("*"))
        if path.suffix in (".py", ".md", ".txt", ".j2", ".sh") and path.is_file()
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if jargon.search(line)
    ]
    assert not bad, bad


@pytest.mark.parametrize("package", PACKAGES)
def test_functions_are_short_enough_to_read_at_once(package):
    """The style rule: no function over 80 lines (a longer one is split where its steps are)."""
    long = []
    for path in sorted((REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


# inputs that share a name with an output: the bundled sample's table, the generic dataset's default file
SAME_NAME_INPUTS = {
    ("recon_score/run.py", "captions.jsonl"),
    ("recon_score/synthetic/tokenizers.py", "captions.jsonl"),
    ("eval/datasets/__init__.py", "captions.jsonl"),
}


def test_run_files_are_named_only_by_the_run():
    """run.json, the journal and every kind's output files are named in recon_score/run_engine.py and
    recon_score/run_outputs.py only: other modules use their constants and readers (docstrings may mention them)."""
    from recon_score import run_outputs

    names = {"journal", "invocations.jsonl"}
    names |= {v for k, v in vars(run_outputs).items() if k.isupper() and isinstance(v, str) and "." in v}
    names |= {f for stem in ("table", "summary") for f in run_outputs.table_files(stem)}
    owners = {"recon_score/run_engine.py", "recon_score/run_outputs.py"}
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel in owners:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                named = isinstance(node, ast.Constant) and node.value in names
                if named and (rel, node.value) not in SAME_NAME_INPUTS:
                    found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not found, found


# the modules that open a run folder; each hands it a RunSpec (eval/cli/study.py passes its folder to
# eval/studies/commands.py, which does)
RUN_COMMANDS = {
    "recon_score/run.py": "score",
    "describer/run.py": "describe",
    "describer/pairs.py": "pairs",
    "retrieval/run.py": "retrieve",
    "eval/generate.py": "generate",
    "eval/evaluate.py": "evaluate",
    "eval/correlate.py": "correlate",
    "eval/cli/study.py": "study",
    "eval/meta_eval/run.py": "correlate --benchmarks",
    "eval/annotate.py": "annotate",
    "eval/add_metrics.py": "metrics add",
}
_LIFECYCLE = ("load", "begin", "plan", "reload", "finish", "publish", "journal", "mine")


def test_every_writing_command_goes_through_the_run():
    """Every writing command hands `RunFolder.run` a spec: the Run has no lifecycle step a command could call
    itself, no module calls one on a run folder, and every module that opens a run folder is listed here."""
    from recon_score.run_engine import RunFolder

    assert [m for m in _LIFECYCLE if hasattr(RunFolder, m)] == []
    opened, bad = set(), []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel == "recon_score/run_engine.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                if isinstance(func, ast.Name) and func.id == "RunFolder":
                    opened.add(rel)
                is_run = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                if is_run and func.value.id == "run" and func.attr in _LIFECYCLE:
                    bad.append(f"{rel}:{node.lineno} run.{func.attr}()")
    assert not bad, bad
    assert opened <= set(RUN_COMMANDS), sorted(opened - set(RUN_COMMANDS))


# calls that change the whole process for everyone in it: a library call must leave them as it found them
PROCESS_WIDE = {
    "torch.manual_seed",
    "torch.random.manual_seed",
    "torch.cuda.manual_seed",
    "torch.cuda.manual_seed_all",
    "torch.random.default_generator.manual_seed",
    "torch.default_generator.manual_seed",
    "torch.set_rng_state",
    "torch.cuda.set_rng_state",
    "np.random.seed",
    "numpy.random.seed",
    "random.seed",
    "torch.set_num_threads",
    "torch.set_num_interop_threads",
    "torch.set_default_dtype",
    "torch.set_default_device",
    "torch.set_float32_matmul_precision",
    "torch.use_deterministic_algorithms",
    "np.seterr",
    "numpy.seterr",
    "sys.setrecursionlimit",
    "resource.setrlimit",
    "logging.basicConfig",
}
# library-wide switches (transformers', diffusers', huggingface_hub's progress bars): never left switched
SWITCHES = {"disable_progress_bar", "disable_progress_bars"}
# the one place that seeds torch (inside torch.random.fork_rng) and turns loading bars off (restored on exit);
# the CLI is the application
RESTORING_HOME = {"recon_score/runtime.py"}
APPLICATION = "eval/cli/"


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _process_wide(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ctypes" for a in node.names):
        return "imports ctypes"
    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ctypes":
        return "imports ctypes"
    if "mallopt" in (getattr(node, "attr", None), getattr(node, "id", None)):
        return "mallopt"
    if isinstance(node, ast.Call) and _dotted(node.func) in PROCESS_WIDE:
        return _dotted(node.func)
    if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in SWITCHES:
        return f"{_dotted(node.func) or ''} (a library-wide switch)"
    return None


def test_no_library_call_changes_process_wide_state():
    """No package module loads ctypes (retrieve-eval once set glibc's malloc thresholds with it), names mallopt,
    reseeds a global random generator or switches a library's progress bars off (outside the one home that
    restores them), or sets threads, default dtypes, matmul precision, numpy error modes, limits or the logging
    configuration: a user's process is theirs."""
    bad = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel.startswith(APPLICATION):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                what = _process_wide(node)
                if what and rel not in RESTORING_HOME:
                    bad.append(f"{rel}:{node.lineno} {what}")
    assert not bad, bad


def test_the_layout_check_sees_each_kind_of_process_wide_call(tmp_path, monkeypatch):
    """The check above on a planted module: each kind is found (so a clean result means something)."""
    planted = tmp_path / "retrieval"
    planted.mkdir()
    (planted / "bad.py").write_text(
        "import ctypes\nimport torch\nctypes.CDLL('libc.so.6').mallopt(-3, 1)\ntorch.manual_seed(0)\n"
        "torch.set_num_threads(1)\ntorch.Generator().manual_seed(0)\nimport transformers.utils.logging as t\n"
        "t.disable_progress_bar()\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", ("retrieval",))
    with pytest.raises(AssertionError) as caught:
        test_no_library_call_changes_process_wide_state()
    found = str(caught.value)
    for what in (
        "bad.py:1 imports ctypes",
        "bad.py:3 mallopt",
        "torch.manual_seed",
        "set_num_threads",
        ":8 t.",
    ):
        assert what in found
    assert "Generator" not in found  # a local generator is the right way, not a finding
