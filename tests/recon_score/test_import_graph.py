"""No import circle inside recon_score: every `import` of a recon_score module, at the top of a file or inside a
function, is an edge; the graph must have no cycle (a circle that only holds because an import sits inside a
function breaks as soon as someone moves it to the top)."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "recon_score"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _edges(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The recon_score modules `name` imports anywhere in its file (`from pkg import mod` names pkg.mod)."""
    found = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return {m for m in found if m in modules and m != name}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle (as a path that returns to its start), or None: depth-first search with colours."""
    state, stack = {}, []

    def visit(v):
        state[v] = "open"
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == "open":
                return [*stack[stack.index(w) :], w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = "done"
        stack.pop()
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_checker_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_circle_inside_recon_score():
    modules = _modules()
    assert {"recon_score.hub", "recon_score.paths", "recon_score.synthetic.smoke"} <= set(modules)
    graph = {m: _edges(m, p, modules) for m, p in modules.items()}
    assert "recon_score.synthetic" in graph["recon_score.hub"]  # the checker sees the edges it should
    assert "recon_score.paths" in graph["recon_score.synthetic.smoke"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_paths_is_a_leaf():
    assert _edges("recon_score.paths", PACKAGE / "paths.py", _modules()) == set()


def test_every_module_imports_in_a_fresh_interpreter():
    """All modules, leaves first (reverse topological order of the graph, ties sorted), in one new interpreter:
    an import-time error or a circle that the AST misses (importlib with a computed name) fails here."""
    modules = _modules()
    graph = {m: _edges(m, p, modules) for m, p in modules.items()}
    order, done = [], set()

    def place(m):
        if m not in done:
            done.add(m)
            for dep in sorted(graph[m]):
                place(dep)
            order.append(m)

    for m in sorted(graph):
        place(m)
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    out = subprocess.run(
        [sys.executable, "-c", code, *order], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
