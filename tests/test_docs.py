"""The README and the docs/ pages stay true to the code and to each other: the architecture
page's generated list is what tools/docs_architecture.py writes from the source today, its
own text names every package of `stream/` and `engines/`, the README stays short and its
links into docs/ resolve, and the pages build as a site with mkdocs in strict mode (a broken
link between pages fails)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.docs_architecture import PAGE, ROOT, main, render, split_page

README_MAX_LINES = 320


def sub_packages(top: str) -> list[str]:
    """Every package folder below `top` (nested ones too), as 'top/name/'."""
    return sorted(init.parent.relative_to(ROOT).as_posix() + "/" for init in (ROOT / top).rglob("*/__init__.py"))


def test_the_architecture_pages_generated_list_is_current() -> None:
    _, section, _ = split_page((ROOT / PAGE).read_text())
    assert section == render(ROOT), "run: python tools/docs_architecture.py"


def test_the_tool_says_in_one_line_when_the_page_is_out_of_date(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for top in ("stream", "engines"):  # the source it reads: the real packages
        (tmp_path / top).symlink_to(ROOT / top)
    page = tmp_path / PAGE
    page.parent.mkdir()
    before, section, after = split_page((ROOT / PAGE).read_text())
    page.write_text(before + section.replace("`stream/runtime/`", "`stream/old_runtime/`") + after)
    assert main(["--check"], root=tmp_path) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "out of date" in err, err
    assert main([], root=tmp_path) == 0  # rewrites the section, and leaves the rest of the page
    assert page.read_text() == (ROOT / PAGE).read_text()
    assert main(["--check"], root=tmp_path) == 0


def test_the_architecture_pages_text_names_every_package() -> None:
    before, _, after = split_page((ROOT / PAGE).read_text())
    prose = before + after
    wanted = sub_packages("stream") + sub_packages("engines")
    assert "stream/runtime/" in wanted and "engines/backends/trt/" in wanted  # the folders were read
    assert [name for name in wanted if name not in prose] == []


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move details to docs/"


def test_the_readmes_links_into_docs_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#\s]*)(?:#[^)\s]*)?\)", text)
    assert links, "the README links to no docs/ page"
    assert [link for link in links if not (ROOT / link).is_file()] == []


def build_site(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # not --quiet: mkdocs would drop the warnings before strict mode counts them
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=config.parent, capture_output=True, text=True, timeout=300)


def test_the_docs_build_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the test extra installs it)")
    done = build_site(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()


@pytest.mark.parametrize("link", ["no-such-page.md", "gpu.md#no-such-heading"])
def test_a_broken_link_between_pages_fails_the_build(tmp_path: Path, link: str) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the test extra installs it)")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    with (tmp_path / "docs" / "live.md").open("a") as page:
        page.write(f"\nSee [this]({link}).\n")
    done = build_site(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and link.split("#")[-1] in done.stderr, done.stderr[-3000:]
