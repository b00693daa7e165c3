"""The package's floor plan, checked on the source: every import (lazy ones included) runs
down the layers, none runs in a cycle, `engines` never imports `stream`, no test module
imports another, and the tools import no test module."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first. A module may import its own folder and the layers below it; `stream.errors`
# and `stream.config` are the floor every layer stands on.
LAYERS = ["base", "runtime", "media", "io", "analysis", "stages", "job", "server", "cli"]
FOLDER_LAYER = {"runtime": "runtime", "media": "media", "sources": "io", "sinks": "io",
                "analysis": "analysis", "stages": "stages", "job": "job", "server": "server", "cli": "cli"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(*folders: str) -> dict[str, Path]:
    found = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports, at the top or inside functions."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    return out


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "stream":
        return None
    if len(parts) == 1 or parts[1] in ("errors", "config"):
        return "base"
    return FOLDER_LAYER.get(parts[1], "base")


PACKAGE = modules("stream", "engines")
GRAPH = {name: imports_of(path, set(PACKAGE)) - {name} for name, path in PACKAGE.items()}


def test_the_layers_cover_every_folder() -> None:
    folders = {p.name for p in (ROOT / "stream").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(FOLDER_LAYER)


def test_no_import_runs_upward() -> None:
    upward = []
    for name, deps in GRAPH.items():
        mine = layer_of(name)
        for dep in deps:
            theirs = layer_of(dep)
            if mine is None:  # engines/
                if dep.startswith("stream"):
                    upward.append(f"{name} -> {dep} (engines never import stream)")
                continue
            if theirs is None or name.split(".")[:2] == dep.split(".")[:2]:
                continue
            if LAYERS.index(theirs) > LAYERS.index(mine):
                upward.append(f"{name} ({mine}) -> {dep} ({theirs})")
            elif theirs == mine and mine != "base":  # sources and sinks share a layer, not each other
                upward.append(f"{name} -> {dep}: sideways within the {mine} layer")
    assert upward == []


def test_there_is_no_import_cycle() -> None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for start in sorted(GRAPH):
        if start not in state:
            visit(start, [start])
    assert cycles == []


@pytest.mark.parametrize("folder", ["tests", "tools"])
def test_no_test_module_is_imported_by_another_or_by_a_tool(folder: str) -> None:
    everything = modules("tests", "tools")
    bad = []
    for name, path in modules(folder).items():
        for dep in imports_of(path, set(everything)):
            if dep.startswith("tests.") and not dep.startswith("tests.fixtures") or \
                    (folder == "tools" and dep.startswith("tests")):
                bad.append(f"{name} -> {dep}")
    assert bad == []


def test_the_checks_see_a_real_graph() -> None:
    """The graph is what the checks above read: make sure it is not empty or blind."""
    assert "stream.runtime.ring" in GRAPH["stream.job.assembly"]
    assert "engines.registry" in GRAPH["stream.job.swap_job"]
    assert any(dep.startswith("stream.sources") for dep in GRAPH["stream.cli.main"])  # a lazy import
