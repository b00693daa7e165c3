"""The wheel's package list is the source tree's: a new folder that is not listed would be
missing from a normal install (and only an editable install would hide it)."""
from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent


def test_every_import_package_is_listed_for_the_wheel() -> None:
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    # every folder that ships something: the import packages and the data folders (the page)
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for top in ("stream", "engines")
               for p in (ROOT / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert listed == on_disk | {"stream.presets"}  # rglob does not enter the link
    data_only = {name for name in on_disk if not (ROOT / name.replace(".", "/") / "__init__.py").exists()}
    assert data_only == {"stream.server.web"}
    for name in data_only:  # a data folder ships its files
        assert setup["package-data"][name]
    # the presets ship inside the wheel, from configs/ (stream/presets links there): the
    # layout stays simple, so an editable install is a plain path entry and says nothing
    assert setup["package-dir"] == {"": "."}
    assert (ROOT / "stream" / "presets").resolve() == (ROOT / "configs").resolve()
    assert sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))


def test_presets_ship_the_reference_mode_and_say_whether_they_smooth() -> None:
    import yaml

    from stream.config import load_config, preset_names

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "*.yaml" in setup["package-data"]["stream.presets"]
    assert {"fast", "quality", "reference"} <= set(preset_names())
    for path in (ROOT / "configs").glob("*.yaml"):
        # every preset states its smoothing switch, so a user reads it off the file
        assert isinstance(yaml.safe_load(path.read_text())["track"]["smoothing"], bool), path.name
        load_config(str(path))
    ref = load_config("reference")
    assert (ref.engine, ref.detect.every, ref.detect.background) == ("neural", 1, False)
    assert (ref.track.smoothing, ref.track.points, ref.select.mode, ref.select.order) == \
        (False, "detector", "all", "detector")
    assert ref.models.recrop_after_paste and not load_config(None).models.recrop_after_paste
