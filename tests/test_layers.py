"""The package's floor plan, checked on the source: every import (lazy ones included) runs
down the layers, none runs in a cycle, `engines` never imports `stream`, the engines' wings
import only what their rules allow, no private name is imported from another module, no
test module imports another, the tools import no test module, and only the tools edit sys.path,
with one idiom."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first. A module may import its own folder and the layers below it; `stream.errors`
# and `stream.config` are the floor every layer stands on.
LAYERS = ["base", "runtime", "media", "io", "analysis", "stages", "job", "ops", "server", "cli"]
FOLDER_LAYER = {"runtime": "runtime", "media": "media", "sources": "io", "sinks": "io",
                "analysis": "analysis", "stages": "stages", "job": "job", "ops": "ops",
                "server": "server", "cli": "cli"}


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


# sys.path: tests find `tools` through pytest's `pythonpath` (pyproject.toml) and edit nothing; a
# tool run as a file puts the tree it sits in first (it measures that tree, not the one the venv's
# editable install points at), with this idiom and no other. cost_parts.py's --root measures another tree.
PATH_EDIT = re.compile(r"\bsys\.path\s*(\.\s*(insert|append|extend|remove|pop|clear)\b|\[|\+=|=(?!=))|addsitedir")
PATH_IDIOM = ('if __package__ in (None, ""):  # run as a file: this tree\'s packages first (a tool measures the tree '
              'it sits in)\n    sys.path.insert(0, str(ROOT))\n')
PATH_EXCEPTIONS = {"tools/cost_parts.py": "    sys.path.insert(0, args.root)\n"}


def stray_path_edits(rel: str, text: str) -> list[str]:
    """The sys.path edits in a file (its path from the root) other than what it is allowed."""
    if rel.startswith("tools/") and PATH_IDIOM in text:
        depth = rel.count("/") + 1
        if f"ROOT = Path(__file__).resolve(){'.parent' * depth}\n" not in text:
            return [f"{rel}: the idiom's ROOT is not the tree's root"]
        text = text.replace(PATH_IDIOM, "", 1)
    if rel in PATH_EXCEPTIONS:
        text = text.replace(PATH_EXCEPTIONS[rel], "", 1)
    return [f"{rel}: {line.strip()}" for line in text.splitlines() if PATH_EDIT.search(line)]


def test_only_the_tools_edit_sys_path_and_all_alike() -> None:
    files = sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "tools").rglob("*.py"))
    files.remove(Path(__file__).resolve())  # this file spells out the edits it looks for
    assert [bad for path in files for bad in stray_path_edits(path.relative_to(ROOT).as_posix(), path.read_text())] \
        == []
    # the check sees an edit other than the idiom, the idiom in a test, and the idiom a level off
    assert stray_path_edits("tools/x.py", "ROOT = 1\nsys.path.append(str(ROOT))\n") == \
        ["tools/x.py: sys.path.append(str(ROOT))"]
    assert len(stray_path_edits("tests/x.py", PATH_IDIOM)) == 1
    assert stray_path_edits("tools/x.py", "ROOT = Path(__file__).resolve().parent\n" + PATH_IDIOM) == \
        ["tools/x.py: the idiom's ROOT is not the tree's root"]


# engines/: the vocabulary at its root every wing speaks, the wings, and what each may import
# (its own wing always). registry.py and fetch.py at the root assemble the wings: they may
# import anything in engines.
VOCABULARY = {"engines", "engines.errors", "engines.face", "engines.frame_views", "engines.protocols",
              "engines.catalog", "engines.int8", "engines.cpu_features", "engines.atomic_write"}
WINGS = ("backends", "models", "classic", "dlib", "geometry", "quantize")
WING_MAY_IMPORT = {
    "backends": set(),  # the root vocabulary only: a backend runs any model, knows none
    "geometry": set(),  # and of the vocabulary, engines.face only (below)
    "models": {"backends", "geometry"},
    "classic": {"geometry"},
    "dlib": {"geometry", "backends"},  # its embedding's ONNX export runs on a backend
    "quantize": {"backends", "models", "dlib", "geometry"},  # calibrates and judges every model kind
}
GEOMETRY_VOCABULARY = {"engines", "engines.face", "engines.errors"}


def wing_of(module: str) -> str | None:
    """The wing of an engines module ('vocabulary', 'root' for registry and fetch, or a wing)."""
    parts = module.split(".")
    if parts[0] != "engines":
        return None
    if module in VOCABULARY:
        return "vocabulary"
    if len(parts) == 2 and parts[1] not in WINGS:
        return "root"
    return parts[1]


def wing_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for name, deps in graph.items():
        mine = wing_of(name)
        if mine is None or mine == "root":
            continue
        for dep in deps:
            theirs = wing_of(dep)
            if theirs is None or theirs == mine:
                continue
            if mine == "vocabulary":
                bad.append(f"{name} -> {dep}: the vocabulary imports only itself")
            elif theirs == "root":
                bad.append(f"{name} -> {dep}: a wing never imports the registry or fetch")
            elif mine == "geometry" and dep not in GEOMETRY_VOCABULARY:
                bad.append(f"{name} -> {dep}: geometry imports only engines.face")
            elif theirs != "vocabulary" and theirs not in WING_MAY_IMPORT[mine]:
                bad.append(f"{name} -> {dep}: {mine} never imports {theirs}")
    return sorted(bad)


def test_the_engines_wings_import_only_what_their_rules_allow() -> None:
    assert wing_violations(GRAPH) == []


def test_the_wing_rules_catch_a_sideways_import() -> None:
    """The rules fail on the imports the wings were made to stop."""
    bad = dict(GRAPH)
    bad["engines.models.gfpgan"] = GRAPH["engines.models.gfpgan"] | {"engines.classic.blend"}
    bad["engines.backends.base"] = GRAPH["engines.backends.base"] | {"engines.models.paste"}
    bad["engines.geometry.face_align"] = GRAPH["engines.geometry.face_align"] | {"engines.protocols"}
    bad["engines.dlib.detector"] = GRAPH["engines.dlib.detector"] | {"engines.registry"}
    assert sorted(set(wing_violations(bad)) - set(wing_violations(GRAPH))) == [
        "engines.backends.base -> engines.models.paste: backends never imports models",
        "engines.dlib.detector -> engines.registry: a wing never imports the registry or fetch",
        "engines.geometry.face_align -> engines.protocols: geometry imports only engines.face",
        "engines.models.gfpgan -> engines.classic.blend: models never imports classic",
    ]


def test_every_engines_folder_is_a_wing() -> None:
    folders = {p.name for p in (ROOT / "engines").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(WINGS)


def private_imports(path: Path) -> list[str]:
    """`from <project module> import _name` in `path`: a private name taken from another module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in ("stream", "engines"):
            out += [f"{module_name(path)}: {node.module}.{a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_private_name_is_imported_across_modules() -> None:
    assert [bad for path in PACKAGE.values() for bad in private_imports(path)] == []


def test_one_onnx_io_reader_one_tensor_spec_one_iou() -> None:
    """The graph's inputs and outputs are read in one place, described by one class, and
    boxes are compared by one function."""
    where: dict[str, list[str]] = {"reads tensor shapes": [], "class TensorSpec": [], "def iou": []}
    for name, path in PACKAGE.items():
        text = path.read_text()
        for needle, key in ((".tensor_type", "reads tensor shapes"), ("\nclass TensorSpec", "class TensorSpec"),
                            ("\ndef iou(", "def iou")):
            if needle in text:
                where[key].append(name)
    assert where == {"reads tensor shapes": ["engines.backends.onnx_io"],
                     "class TensorSpec": ["engines.backends.base"], "def iou": ["engines.face"]}


def test_the_checks_see_a_real_graph() -> None:
    """The graph is what the checks above read: make sure it is not empty or blind."""
    assert "stream.runtime.ring" in GRAPH["stream.job.assembly"]
    assert "engines.registry" in GRAPH["stream.job.swap_job"]
    assert any(dep.startswith("stream.sources") for dep in GRAPH["stream.cli.main"])  # a lazy import
    assert "engines.models.paste" in GRAPH["engines.models.gfpgan"]
    assert "engines.backends.onnx_io" in GRAPH["engines.backends.triton.repo"]


def test_the_engines_settings_are_the_presets_fields() -> None:
    """registry.py reads the detect and models sections through typed protocols: each field
    they name is a field of the preset's section (a renamed one fails here, not silently)."""
    import typing

    from engines.registry import DetectSettings, MaskSettings, ModelSettings
    from stream.config import DetectConfig, MaskConfig, ModelsConfig

    for protocol, section in ((DetectSettings, DetectConfig), (ModelSettings, ModelsConfig),
                              (MaskSettings, MaskConfig)):
        wanted = typing.get_type_hints(protocol)
        have = typing.get_type_hints(section)
        assert {name: have.get(name) for name in wanted} == wanted, section.__name__
