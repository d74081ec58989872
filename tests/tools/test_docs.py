"""The Markdown pages as a reader follows them: the line caps of the pages that grow (README,
the results pages) hold, and every relative link in a tracked *.md file reaches a file that
exists and, with an #anchor, a heading of that file (GitHub's slugs). A failure names the
file, the line and the link."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The most lines a page may have: a README is a door, a results page one current table per
# claim (history lives in git).
CAPS = {"README.md": 300, "perf/RESULTS.md": 400, "perf/results/*.md": 300}

FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*(?:[ \t]#+[ \t]*)?$")
# [text](target "title") and ![alt](target): the target runs to the first space or ')'.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\".*\")?\s*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"", re.I)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files(root):
    """The *.md files git tracks under root (every *.md outside hidden and build folders when
    root is not a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "*.md"], cwd=root, check=True,
                             capture_output=True, text=True).stdout
        files = [root / p for p in out.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in root.rglob("*.md")
                 if not any(part.startswith(".") or part == "build"
                            for part in p.relative_to(root).parts)]
    return sorted(p for p in files if p.is_file())


def prose_lines(text):
    """(line number, line, line with its code spans blanked) of the lines outside fenced
    code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is not None:
            if m and m.group(1) == fence:
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield number, line, CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading's text: the rendered text (link targets, emphasis and
    code marks dropped) in lower case, punctuation other than - and _ removed, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # _emphasis_, not snake_case
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    """Every anchor of a Markdown file: its headings' slugs, a repeated slug numbered -1, -2,
    ... in order, and the names of its HTML anchors."""
    seen, found = {}, set()
    for _, line, prose in prose_lines(path.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(prose))
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(root, files):
    """'file:line: link: why' for each relative link of files that reaches no file, or no
    heading of its target."""
    cache, problems = {}, []
    for path in files:
        rel = path.relative_to(root)
        for number, _, line in prose_lines(path.read_text(encoding="utf-8")):
            targets = INLINE_LINK.findall(line)
            m = REFERENCE_DEF.match(line)
            if m:
                targets.append(m.group(1))
            for target in targets:
                if not target or SCHEME.match(target) or target.startswith("//"):
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                where = f"{rel}:{number}: ({target})"
                if file_part.startswith("/"):
                    problems.append(f"{where}: an absolute path; links are relative")
                    continue
                if not dest.exists():
                    problems.append(f"{where}: no such file {file_part}")
                    continue
                if not anchor:
                    continue
                if dest.suffix.lower() != ".md" or dest.is_dir():
                    problems.append(f"{where}: an #anchor into a file that is not Markdown")
                    continue
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    problems.append(f"{where}: no heading of {dest.relative_to(root)} has the "
                                    f"anchor #{anchor}")
    return problems


def over_cap(root):
    """'file: n lines, cap m' for each capped page that is longer than its cap."""
    problems = []
    for pattern, cap in CAPS.items():
        for path in sorted(root.glob(pattern)):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > cap:
                problems.append(f"{path.relative_to(root)}: {n} lines, cap {cap}")
    return problems


def test_pages_keep_their_line_caps():
    assert (ROOT / "README.md").is_file() and (ROOT / "perf/RESULTS.md").is_file()
    problems = over_cap(ROOT)
    assert not problems, "pages over their line cap:\n" + "\n".join(problems)


def test_every_relative_link_and_anchor_resolves():
    files = markdown_files(ROOT)
    assert ROOT / "README.md" in files
    problems = broken_links(ROOT, files)
    assert not problems, "broken links:\n" + "\n".join(problems)


@pytest.mark.parametrize("heading, expected", [
    ("Codec fidelity on real tensors", "codec-fidelity-on-real-tensors"),
    ("Emulated collectives, flat and hier", "emulated-collectives-flat-and-hier"),
    ("`hier`: exact inside a node, compressed between nodes",
     "hier-exact-inside-a-node-compressed-between-nodes"),
    ("What `CCOMPRESS_TRACE` shows (and *why*)", "what-ccompress_trace-shows-and-why"),
    ("The [GPU](gpu.md) tables: 4.5 bits/element", "the-gpu-tables-45-bitselement"),
    ("Ünïcode stays", "ünïcode-stays"),
])
def test_slug_follows_github(heading, expected):
    assert slug(heading) == expected


def test_checker_names_file_line_and_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/a.md").write_text(
        "# Title\n\n## Part\n\n## Part\n\n"
        "[ok](b.md#other) [ok](#part-1) [ok](../README.md)\n"
        "[missing file](c.md) [missing anchor](b.md#nothing)\n"
        "```\n[inside a fence](nowhere.md)\n```\n"
        "`[in a code span](nowhere.md)` [ext](https://example.org/x.md)\n"
        "[bad anchor here](#part-2) [ok](b.md#the-code-heading)\n", encoding="utf-8")
    (tmp_path / "docs/b.md").write_text("# Other\n### The `code` heading\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("x\n" * 301, encoding="utf-8")
    files = [tmp_path / "docs/a.md", tmp_path / "docs/b.md", tmp_path / "README.md"]
    assert broken_links(tmp_path, files) == [
        "docs/a.md:8: (c.md): no such file c.md",
        "docs/a.md:8: (b.md#nothing): no heading of docs/b.md has the anchor #nothing",
        "docs/a.md:13: (#part-2): no heading of docs/a.md has the anchor #part-2",
    ]
    assert over_cap(tmp_path) == ["README.md: 301 lines, cap 300"]
