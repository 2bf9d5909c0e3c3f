"""The README and the documentation site (docs/): links that resolve, sections that were not lost,
and a docstring on every public function and class (the API reference is generated from them).

Pure standard library and no JAX: these read files only. `make docs` builds the site itself with
warnings as errors (CI does too); these checks also cover what Sphinx does not read (README.md)."""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"

FENCE = re.compile(r"^(`{3,}|~{3,})")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target ends at the first space (an optional "title" follows).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+\1")
INCLUDE = re.compile(r"^```\{include\}\s+(\S+)")


def markdown_pages() -> list[pathlib.Path]:
    """README.md and every Markdown page of docs/ (not the build output)."""
    pages = [README] + sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    return [p for p in pages if not p.is_symlink()]


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks, with inline code removed."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line.strip())
        if fence is None and match:
            fence = match.group(1)[0] * 3
            continue
        if fence is not None:
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                fence = None
            continue
        yield number, INLINE_CODE.sub("", line)


def github_slug(title: str) -> str:
    """GitHub's heading anchor (as MyST's `myst_heading_anchors` makes it): the heading's text,
    lower-cased, spaces to hyphens, every character but word characters, hyphens and spaces dropped."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading counts as its text
    text = text.replace("`", "").replace("**", "")
    return re.sub(r"[^\w\- ]", "", text.lower().replace(" ", "-"))


def anchors(path: pathlib.Path) -> set[str]:
    """The heading anchors of a Markdown file, numbered as GitHub numbers repeats (x, x-1, x-2), with
    the headings of the files it pulls in with MyST's `{include}` directive (as the built page has)."""
    text = path.read_text(encoding="utf-8")
    found: list[str] = []
    for line in text.splitlines():
        include = INCLUDE.match(line.strip())
        if include:
            found.extend(sorted(anchors((path.parent / include.group(1)).resolve())))
    for _, line in prose_lines(text):
        match = HEADING.match(line)
        if match:
            slug, n = github_slug(match.group(2)), 1
            unique = slug
            while unique in found:
                unique, n = f"{slug}-{n}", n + 1
            found.append(unique)
    return set(found)


def relative_links(path: pathlib.Path):
    """(line number, target) of every relative Markdown link and image of a page."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for match in LINK.finditer(line):
            target = match.group(1)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                yield number, target


def broken_links(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """Each relative link of `path` whose file or heading anchor does not exist, as 'file:line: target (why)',
    paths relative to `root`."""
    broken = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not linked.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{where} (no heading with anchor #{anchor} in {linked.relative_to(root)})")
        elif anchor and linked.suffix != ".md":
            broken.append(f"{where} (an anchor into a file that is not Markdown)")
    return broken


def test_github_slugs_match_hand_worked_cases():
    assert github_slug("Quick start") == "quick-start"
    assert github_slug("Theorem 1 needs lambda_t <= 1") == "theorem-1-needs-lambda_t--1"
    assert github_slug("Brax's environments, and your own") == "braxs-environments-and-your-own"
    assert github_slug("Table 2 at 5% of the paper's budget: the two Hopper rows (NVIDIA H200)") == (
        "table-2-at-5-of-the-papers-budget-the-two-hopper-rows-nvidia-h200")
    assert github_slug("`fedjax-rl render` and **videos**") == "fedjax-rl-render-and-videos"


def test_link_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path):
    tmp_path = tmp_path.resolve()
    (tmp_path / "other.md").write_text("# Title\n\n## A section\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-section) [repeat](other.md#a-section-1) [self](#top) ![img](missing.png)\n"
        "[bad](other.md#no-such) `[code](nowhere.md)` [web](https://example.org/x.md)\n\n"
        "```\n[fenced](nowhere.md)\n```\n\n# Top\n")
    assert broken_links(page, root=tmp_path) == [
        "page.md:1: missing.png (no such file)",
        "page.md:2: other.md#no-such (no heading with anchor #no-such in other.md)",
    ]


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = broken_links(page)
    assert not broken, "links to missing files or headings:\n" + "\n".join(broken)


def test_readme_links_into_the_docs():
    targets = [target for _, target in relative_links(README)]
    assert any(t.startswith("docs/") for t in targets), targets
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_readme_quick_start_commands_are_make_targets():
    readme = README.read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for command in ("make demo", "make test"):
        assert re.search(rf"^{command}\s", readme, re.M), command
        assert re.search(rf"^{command.split()[1]}:", makefile, re.M), command


# Where each section of the README as it was before the documentation site (issue 47) went: the
# page and heading that now hold its text. The README keeps a short version of some.
OLD_README_SECTIONS = {
    "Quick start": "docs/getting_started.md#getting-started",
    "What is here": "docs/overview.md#what-is-here",
    "Command line": "docs/command_line.md#command-line",
    "Watching training, seeing a policy": "docs/watching.md#watching-training-seeing-a-policy",
    "Python API": "docs/python_api.md#python-api",
    "Reproducibility": "docs/reproducibility.md#reproducibility",
    "Several processes, several machines": "docs/federation.md#several-processes-several-machines",
    "Design in brief": "docs/design.md#design-in-brief",
    "How omega reaches the loss": "docs/design.md#how-omega-reaches-the-loss",
    "The robust term, one component": "docs/algorithms.md#the-robust-term-one-component",
    "Aggregation rules": "docs/federation.md#aggregation-rules",
    "LunarLander-v3": "docs/environments.md#lunarlander-v3",
    "MuJoCo locomotion: Hopper-v4, Walker2d-v4, HalfCheetah-v4, Ant-v4":
        "docs/environments.md#mujoco-locomotion-hopper-v4-walker2d-v4-halfcheetah-v4-ant-v4",
    "Brax's environments, and your own": "docs/environments.md#braxs-own-environments",
    "Findings": "docs/findings.md#findings",
    "Tests and benchmarks": "docs/tests.md#tests",
    "Dependencies": "docs/dependencies.md#dependencies",
}


@pytest.mark.parametrize("section", sorted(OLD_README_SECTIONS))
def test_every_old_readme_section_has_its_page(section):
    file_part, _, anchor = OLD_README_SECTIONS[section].partition("#")
    page = ROOT / file_part
    assert page.exists(), f"{section!r} moved to {file_part}, which is gone"
    assert anchor in anchors(page), f"{section!r} moved to {file_part}, which no longer has #{anchor}"


def missing_docstrings() -> list[str]:
    """'path:line name' of each module without a docstring and each public (no leading underscore)
    module-level function and class of fedjax_rl without one."""
    missing = []
    for path in sorted((ROOT / "fedjax_rl").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(ROOT)
        if not ast.get_docstring(tree):
            missing.append(f"{where}:1 (module)")
        for node in tree.body:
            public = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_")
            if public and not ast.get_docstring(node):
                missing.append(f"{where}:{node.lineno} {node.name}")
    return missing


def test_every_public_function_and_class_has_a_docstring():
    missing = missing_docstrings()
    assert not missing, "public functions and classes without a docstring:\n" + "\n".join(missing)


# A whole-table count as the docs quote it, and as the committed tables print it (Tables 1 and 2; the
# heterogeneity table's line names its units before its counts).
QUOTED_COUNT = re.compile(r"\bwins (\d+), loses (\d+), even (\d+) of (\d+)\b")
ANY_WINS = re.compile(r"\bwins (\d+)(?![.\d])")
TABLE_COUNT = re.compile(r"^\*\*Whole table[^:]*: over (\d+) \(task, seed\) units \([^)]*\), \S+ wins (\d+), "
                         r"loses (\d+), even (\d+)")
HETEROGENEITY_COUNT = re.compile(r"^\*\*Whole table\*\* .*?(\d+) \(task, seed\) units: \S+ wins (\d+) \([^)]*\), "
                                 r"loses (\d+), even (\d+)")


def committed_whole_table_counts() -> set[tuple[int, int, int, int]]:
    """(wins, losses, even, units) of every whole-table line of the committed tables under results/."""
    found = set()
    for table in sorted((ROOT / "results").glob("*/*.md")):
        if table.name == "README.md":
            continue
        for line in table.read_text().splitlines():
            match = TABLE_COUNT.match(line) or HETEROGENEITY_COUNT.match(line)
            if match:
                units, wins, losses, even = map(int, match.groups())
                found.add((wins, losses, even, units))
    return found


def test_the_whole_table_counts_the_docs_quote_are_the_committed_tables():
    """REPRODUCTION.md, the README's findings and docs/findings.md quote whole-table lines as "wins W,
    loses L, even E of N"; each must be a line of a committed table, so that a rebuilt table cannot leave
    a stale count behind (issue 84: 15 / 2 / 5 and 10 / 7 / 5 were quoted where the table read 13 / 1 / 8
    and 9 / 3 / 10). Every "wins N" in them is such a quote, so none escapes the check by its wording."""
    committed = committed_whole_table_counts()
    assert {(23, 19, 38, 80), (22, 1, 11, 34), (12, 4, 18, 34), (3, 8, 9, 20), (4, 3, 3, 10)} <= committed
    for page in (README, ROOT / "REPRODUCTION.md", DOCS / "findings.md"):
        text = " ".join(page.read_text().split())  # a quote may wrap across lines
        quoted = [tuple(map(int, m.groups())) for m in QUOTED_COUNT.finditer(text)]
        assert len(quoted) == len(ANY_WINS.findall(text)), (
            f"{page.name}: a whole-table count not written as 'wins W, loses L, even E of N': "
            f"{[text[m.start():m.start() + 60] for m in ANY_WINS.finditer(text)]}")
        stale = [count for count in quoted if count not in committed]
        assert not stale, f"{page.name} quotes whole-table counts no committed table prints: {stale}"
