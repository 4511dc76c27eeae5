"""MkDocs hook: the course's exercises, rendered on the site from their one source.

Each exercise is a folder of the repository's ``tutorials/``: ``NN-name/README.md`` (the
statement) and ``NN-name/starter/*.py`` (the files a student completes). At build time this
hook turns each into the page ``course/NN-name.md``: the README, then its starter files,
each viewable on the page. Nothing is copied into ``docs/``.

A README is written once and read in three places: on GitHub beside its starter, on this site,
and in the folder ``minipaged exercises init`` copies out. Its links are rewritten here, at
build time, from whatever form works in the other two places:

- a relative link into the repository's ``docs/`` (``../../docs/explanation/waste.md``)
  becomes a link to that page of the site;
- an absolute link under the site's address (``site_url``), such as
  ``https://example.org/minipaged/explanation/waste.html``, the form that still works in a
  copied folder, becomes the same relative page link, so that the site never links out to
  itself and the build checks the page exists;
- a link to another exercise's README (``../03-fork/README.md``) becomes that exercise's page,
  and ``../README.md`` the course's index;
- a link to a starter file (``starter/memory.py``) becomes the place on the page that shows it.

Under the README the page lists the pages to read first, from the course's table
(``docs/course/index.md``), so every exercise links back to the pages that teach it. The
pages join the nav's "Course" section in order (``course_nav``): mkdocs.yml does not list them.

Any other relative link fails the build: it names a file the site does not have. GitHub's
``<details><summary>`` hint blocks become the site's collapsible blocks, so that the Markdown
inside them renders.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

COURSE = "course"
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
DETAILS = re.compile(
    r"^<details>\s*\n<summary>(?P<summary>.*?)</summary>\s*\n(?P<body>.*?)\n</details>\s*$",
    re.M | re.S,
)
EXERCISE_FOLDER = re.compile(r"^\d{2}-[a-z0-9-]+$")


def exercise_folders(root: Path) -> list[Path]:
    """``tutorials/NN-name`` for every exercise, in order."""
    return sorted(
        path
        for path in (root / "tutorials").iterdir()
        if path.is_dir() and EXERCISE_FOLDER.match(path.name) and (path / "README.md").is_file()
    )


def page_of(folder: Path) -> str:
    """The site page of an exercise folder, relative to docs/."""
    return f"{COURSE}/{folder.name}.md"


def starter_files(folder: Path) -> list[Path]:
    return sorted((folder / "starter").glob("*.py"))


def starter_anchor(name: str) -> str:
    return "starter-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def site_page(target: str, site_url: str | None) -> str | None:
    """The docs/-relative page an absolute link under ``site_url`` names, or None when it is
    not one."""
    if not site_url:
        return None
    base, url = urlparse(site_url), urlparse(target)
    if (url.scheme, url.netloc) != (base.scheme, base.netloc):
        return None
    prefix = base.path if base.path.endswith("/") else base.path + "/"
    if not url.path.startswith(prefix):
        return None
    path = url.path[len(prefix) :]
    if path == "" or path.endswith("/"):
        path += "index.html"
    if path.endswith(".html"):
        path = path[: -len(".html")] + ".md"
    return path


def rewrite_link(target: str, folder: Path, root: Path, site_url: str | None) -> str:
    """The site's form of one README link (see the module's docstring)."""
    address, _, anchor = target.partition("#")
    suffix = f"#{anchor}" if anchor else ""
    page = site_page(address, site_url)
    if page is not None:
        return f"../{page}{suffix}"
    if re.match(r"^[a-z][a-z0-9+.-]*:", address, re.I) or not address:
        return target  # another site, mailto:, or an anchor on this page
    resolved = (folder / address).resolve()
    docs, tutorials = (root / "docs").resolve(), (root / "tutorials").resolve()
    if resolved.is_relative_to(docs):
        return "../" + resolved.relative_to(docs).as_posix() + suffix
    if resolved == tutorials / "README.md":
        return "index.md" + suffix
    if resolved.parent.parent == tutorials and resolved.name == "README.md":
        return f"{resolved.parent.name}.md{suffix}"
    if resolved.parent == (folder / "starter").resolve() and resolved.is_file():
        return "#" + starter_anchor(resolved.name)
    where = f"tutorials/{folder.name}/README.md"
    raise PluginError(
        f"{where} links to {target!r}, which is neither a page of the site (under docs/ or "
        f"{site_url or 'site_url'}), an exercise, nor one of its starter files: the site "
        "cannot show it; link to a docs page instead"
    )


def details_to_admonition(markdown: str) -> str:
    """GitHub's ``<details><summary>S</summary> ... </details>`` as ``??? tip "S"``."""

    def convert(match: re.Match) -> str:
        lines = match["body"].split("\n")
        body = "\n".join(("    " + line) if line.strip() else "" for line in lines)
        summary = match["summary"].strip().replace('"', "'")
        return f'??? tip "{summary}"\n{body}'

    return DETAILS.sub(convert, markdown)


def read_first(number: int, root: Path) -> str:
    """The "read first" cell of exercise ``number``'s row in the course's table
    (``docs/course/index.md``): links relative to ``course/``, as the exercise's page is."""
    index = (root / "docs" / COURSE / "index.md").read_text(encoding="utf-8")
    row = re.search(rf"^\| {number:02d} \|(.*)$", index, re.M)
    if row is None:
        raise PluginError(f"docs/course/index.md has no row for exercise {number:02d}")
    return [cell.strip() for cell in row[1].split("|")][2]


def exercise_markdown(folder: Path, root: Path, site_url: str | None) -> str:
    """The site page of one exercise: its README, links rewritten, then its starter files,
    and the pages to read first, as the course's table lists them."""
    readme = (folder / "README.md").read_text(encoding="utf-8")
    readme = LINK.sub(
        lambda m: f"[{m['text']}]({rewrite_link(m['target'], folder, root, site_url)})", readme
    )
    number = int(folder.name[:2])
    lines = [details_to_admonition(readme).rstrip(), "", "## Starter files", ""]
    lines.append(
        f"`minipaged exercises init {number} DIR` copies this statement and these files into "
        f"`DIR`; in a source checkout they are `tutorials/{folder.name}/starter/`. "
        f"`minipaged exercises check {number}` grades them."
    )
    for path in starter_files(folder):
        code = path.read_text(encoding="utf-8").rstrip("\n")
        lines += ["", f'<a id="{starter_anchor(path.name)}"></a>', ""]
        lines += [f'??? example "starter/{path.name}"', "", "    ```python"]
        lines += [("    " + line) if line else "" for line in code.split("\n")]
        lines += ["    ```"]
    lines += ["", "## On this site", ""]
    lines += [f"Read first: {read_first(number, root)}. [All exercises](index.md)."]
    return "\n".join(lines) + "\n"


def course_nav(nav: list, root: Path) -> list:
    """``nav`` with every exercise's page added to the end of its "Course" section, in order:
    mkdocs.yml lists the course's own pages only, so a new exercise folder needs no edit
    there."""
    pages = [page_of(folder) for folder in exercise_folders(root)]
    for item in nav:
        if isinstance(item, dict) and "Course" in item:
            listed = set(item["Course"])
            item["Course"] = item["Course"] + [p for p in pages if p not in listed]
            return nav
    raise PluginError("mkdocs.yml's nav has no 'Course' section for the exercises' pages")


def on_config(config, **kwargs):
    config.nav = course_nav(config.nav, Path(config.config_file_path).resolve().parent)
    return config


def on_files(files, config, **kwargs):
    root = Path(config.config_file_path).resolve().parent
    for folder in exercise_folders(root):
        content = exercise_markdown(folder, root, config.site_url)
        files.append(File.generated(config, page_of(folder), content=content))
    return files
