"""The generated part of docs/architecture.md: every package of `stream` and `engines`, its
modules, and the first sentence of each one's docstring, read from the source (nothing is
imported), so the page cannot drift from the code.

    python tools/docs_architecture.py           # rewrite the section between the page's markers
    python tools/docs_architecture.py --check   # exit 1, in one line, if the page is out of date

tests/test_docs.py runs `render` and compares it with the page.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = Path("docs") / "architecture.md"
TOPS = ("stream", "engines")
START = "<!-- generated: tools/docs_architecture.py -->"
END = "<!-- end generated -->"

# A full stop that ends a sentence: followed by a space or the end, and not an abbreviation's.
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)[.!?](?=\s|$)")


def first_sentence(path: Path) -> str:
    """The first sentence of the module's docstring (its first paragraph, on one line)."""
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path)))
    if not doc:
        return "(no docstring)"
    paragraph = " ".join(line.strip() for line in doc.strip().split("\n\n")[0].splitlines())
    end = _SENTENCE_END.search(paragraph)
    return paragraph[:end.end()] if end else paragraph


def packages(root: Path) -> list[Path]:
    """Every package folder under the top-level packages, each after its parent."""
    found = []
    for top in TOPS:
        found += [init.parent for init in (root / top).rglob("__init__.py")]
    return sorted(found, key=lambda p: p.relative_to(root).parts)


def render(root: Path = ROOT) -> str:
    """The section's Markdown: a heading per package, a line per module."""
    out: list[str] = []
    for package in packages(root):
        name = package.relative_to(root).as_posix() + "/"
        out += [f"### `{name}`", "", first_sentence(package / "__init__.py"), ""]
        for module in sorted(package.glob("*.py")):
            if module.name != "__init__.py":
                out.append(f"- `{module.name}`: {first_sentence(module)}")
        if out[-1] != "":
            out.append("")
    return "\n".join(out)


def split_page(text: str) -> tuple[str, str, str]:
    """The page as (before the section, the section, after it); ValueError without markers."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise ValueError(f"{PAGE} needs one '{START}' line and one '{END}' line after it")
    before, rest = text.split(START, 1)
    section, after = rest.split(END, 1)
    return before + START + "\n", section.lstrip("\n"), END + after


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the page is up to date")
    args = parser.parse_args(argv)
    page = root / PAGE
    try:
        before, section, after = split_page(page.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    wanted = render(root)
    if section == wanted:
        if not args.check:
            print(f"{PAGE}: up to date")
        return 0
    if args.check:
        print(f"error: {PAGE}'s generated section is out of date: run python tools/docs_architecture.py",
              file=sys.stderr)
        return 1
    page.write_text(before + wanted + after)
    print(f"{PAGE}: rewrote the generated section")
    return 0


if __name__ == "__main__":
    sys.exit(main())
