"""The handout a student gets from ``minipaged exercises init N DIR``: exercise N's README and
starter files, copied out of the installed package into a folder of their own.

An exercise's README is written once, in ``tutorials/NN-name/``, and read in three places: in
the repository, beside its ``starter/`` folder (its links are relative: ``starter/memory.py``,
``../../docs/explanation/kv-memory.md``); on the site, where a build hook rewrites those links
to the site's pages (``docs/hooks/course.py``); and in the folder ``init`` makes, which holds
the starter files but no ``starter/`` and no ``docs/``. ``handout`` rewrites the links for that
third place, so that every one of them works where the README is copied: a starter file's
link names the file beside it, and a page of the docs becomes its address on the published
site: ``SITE_URL``, or where an instructor publishes their copy (``init``'s ``site``, the
command line's ``--site-url`` or ``MINIPAGED_SITE_URL``, checked by ``site_url``). In that
folder ``minipaged exercises check N`` grades the folder itself
(``minipaged.grader.student_folder.folder_of``), so the README's commands are right there too.

The hints come in two tiers: the README's own "Hints" section, and a second tier in
``hints.md`` beside it, which ``minipaged exercises hint N --tier 2`` prints (``hints``). A
terminal shows every line of a README at once, so the second tier lives where a student has
to ask for it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import posixpath
import re
import shlex
import urllib.parse
from pathlib import Path

from minipaged import atomic_write
from minipaged.grader.exercises import exercise
from minipaged.output_paths import check_can_write_in

PACKAGES = ("minipaged", "tui", "cuda_kernels")
"""The project's import packages: no exercise is copied into one."""

SITE_URL = "https://example.org/minipaged/"
"""Where the project's site is published: the default of ``site_url`` in ``mkdocs.yml`` (a
test holds the two equal). Its pages are folders (``explanation/kv-memory/``), as MkDocs
writes them by default."""

SITE_URL_VARIABLE = "MINIPAGED_SITE_URL"
"""The environment variable naming where an instructor publishes their build of the site
(``site_url`` in their ``mkdocs.yml``): the handouts' links follow it unless ``--site-url``
says otherwise."""

_URL_CHARACTERS = re.compile(r"[A-Za-z0-9._~:/@!$&*+,;=%-]+")
"""What an address may hold so that a Markdown link ``[text](address)`` stays one link: no
space, parenthesis, quote or angle bracket (and no ``?query`` or ``#anchor``, which the page
paths would follow)."""


def site_url(text: str, given_by: str = "--site-url") -> str:
    """``text``, the address of a published copy of the site (``https://host/path/``), ending
    in ``/``. Raises ``ValueError`` in one line naming ``given_by``, the value and the fix."""
    parts = urllib.parse.urlsplit(text)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # a port that is not a number, or out of range
        port_ok = False
    if not (
        _URL_CHARACTERS.fullmatch(text)
        and parts.scheme in ("http", "https")
        and parts.hostname
        and port_ok
    ):
        raise ValueError(
            f"{given_by} {text!r} is not the address of a web site: give the http:// or "
            f"https:// address the site is published at, such as {SITE_URL}"
        )
    return text if text.endswith("/") else text + "/"


def default_site() -> str:
    """Where the handouts' links point when no ``--site-url`` is given: ``MINIPAGED_SITE_URL``
    if it is set, else ``SITE_URL``."""
    given = os.environ.get(SITE_URL_VARIABLE)
    return site_url(given, f"${SITE_URL_VARIABLE}") if given else SITE_URL


LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
"""A Markdown link ``[text](target)`` (not an image)."""


def site_address(page: str, site: str = SITE_URL) -> str:
    """The published address of the docs page ``page`` (relative to ``docs/``, with its
    ``#anchor`` if any) on the site at ``site``: ``explanation/kv-memory.md#b`` -> ``site`` +
    ``explanation/kv-memory/#b``."""
    path, _, anchor = page.partition("#")
    path = path.removesuffix(".md")
    path = "" if path == "index" else path.removesuffix("/index") + "/"
    return site + path + (f"#{anchor}" if anchor else "")


def rewrite_link(target: str, folder: str, site: str = SITE_URL) -> str:
    """One link of ``tutorials/{folder}/README.md`` as it must read in the copied folder, the
    docs' pages on the site at ``site``. Raises ``ValueError`` naming a relative link that
    leads nowhere there."""
    address, _, anchor = target.partition("#")
    if not address or re.match(r"^[a-z][a-z0-9+.-]*:", address, re.I):
        return target  # another site, mailto:, or an anchor on this page
    where = posixpath.normpath(posixpath.join("tutorials", folder, address))
    suffix = f"#{anchor}" if anchor else ""
    if where.startswith("docs/"):
        return site_address(where.removeprefix("docs/") + suffix, site)
    if where == "tutorials/README.md":
        return site_address("course/index.md" + suffix, site)
    parts = where.split("/")
    if len(parts) == 3 and parts[0] == "tutorials" and parts[2] == "README.md":
        return site_address(f"course/{parts[1]}.md{suffix}", site)
    if len(parts) == 4 and parts[:3] == ["tutorials", folder, "starter"]:
        return parts[3] + suffix  # the starter file, beside the README in the copy
    raise ValueError(
        f"tutorials/{folder}/README.md links to {target!r}, which a copied folder does not "
        "have: link to a page of docs/, another exercise's README, or a starter file"
    )


def handout(readme: str, folder: str, site: str = SITE_URL) -> str:
    """The README of ``tutorials/{folder}/`` (or a part of it) with its links rewritten for a
    copied folder, the docs' pages on the site at ``site``."""
    return LINK.sub(lambda m: f"[{m['text']}]({rewrite_link(m['target'], folder, site)})", readme)


def init(number: int, directory: str | Path, site: str = SITE_URL) -> list[str]:
    """Copy exercise ``number``'s README (as its ``handout``, linking to the site at
    ``site``) and starter files into ``directory``; return their names. Refuses, changing
    nothing, when ``directory`` is not a folder that can hold them or any of them is there
    already (a symbolic link too, dangling or not: none is followed)."""
    ex = exercise(number)
    if not str(directory).strip():
        raise ValueError("exercises init needs a folder to copy into, got an empty name: give DIR")
    control = [c for c in str(directory) if not c.isprintable()]
    if control:  # a newline or an escape in a name shows as something else, and is hard to type
        raise ValueError(
            f"the folder name {str(directory)!r} holds the control character {control[0]!r}: "
            "choose a name without one"
        )
    directory = Path(directory)
    for folder in (directory, *directory.parents):  # refused here, before anything is written
        if folder.is_symlink() and not folder.exists():
            raise ValueError(
                f"{folder} is a symbolic link to {os.readlink(folder)}, which does not exist: "
                "create that folder first, or choose another"
            )
        if folder.exists() and not folder.is_dir():
            kind = atomic_write.not_a_file(folder) or "a file"
            raise ValueError(f"{folder} is {kind}, not a folder: choose a new or empty folder")
    check_outside_the_library(directory)
    nearest = next(folder for folder in (directory, *directory.parents) if folder.exists())
    try:  # an unwritable place: refused before any folder is made
        check_can_write_in(nearest, str(directory))
    except argparse.ArgumentTypeError as error:
        raise ValueError(str(error)) from None
    readme = ex.starter.parent / "README.md"
    sources = [readme] + [ex.starter / name for name in ex.files]
    clashes = [s.name for s in sources if os.path.lexists(directory / s.name)]
    if clashes:
        raise ValueError(
            f"{directory} already holds {', '.join(clashes)}: choose an empty folder, or "
            f"check the work there with `minipaged exercises check {number} --path "
            f"{typed_back(directory)}`"
        )
    text = handout(readme.read_text(encoding="utf-8"), ex.folder, site)
    contents = [(readme.name, text.encode("utf-8"))]
    contents += [(source.name, source.read_bytes()) for source in sources[1:]]
    directory.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    try:
        for name, data in contents:
            atomic_write.create(directory / name, data)
            made.append(directory / name)
    finally:  # a full disk partway: no half copy, which a second init would refuse
        for file in made if len(made) < len(contents) else ():
            file.unlink(missing_ok=True)
    return [name for name, _ in contents]


def typed_back(path: str | Path) -> str:
    """``path`` as a student types it back into a shell: quoted where the shell would split or
    expand it, and after ``./`` where it begins with a dash, which every command takes for a
    flag (``cd -x`` fails; ``cd ./-x`` goes there)."""
    text = str(path)
    return shlex.quote(f"./{text}" if text.startswith("-") else text)


def check_outside_the_library(directory: Path) -> None:
    """Refuse a folder inside the project's own packages (``minipaged``, ``tui``,
    ``cuda_kernels``, installed or in a checkout): a student's copy there sits among the
    library's modules, and a reinstall deletes it. (Found without importing them.)"""
    where = directory.resolve()
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        for package in map(Path, spec.submodule_search_locations or ()) if spec else ():
            if where == package.resolve() or package.resolve() in where.parents:
                raise ValueError(
                    f"{directory} is inside the {name} package ({package}): a copy there would "
                    "sit among the library's modules and go with a reinstall; choose a folder "
                    "of your own, such as ~/minipaged-exercises"
                )


def hints(number: int, tier: int = 1) -> str:
    """Exercise ``number``'s hints of ``tier``: 1, the README's "Hints" section; 2, its
    ``hints.md``, the tier to read only when stuck."""
    folder = exercise(number).starter.parent
    if tier == 2:
        return (folder / "hints.md").read_text(encoding="utf-8").strip()
    readme = (folder / "README.md").read_text(encoding="utf-8")
    section = readme.partition("\n## Hints\n")[2].partition("\n## ")[0]
    return f"{readme.splitlines()[0].removeprefix('# ')} · hints\n\n{section.strip()}"
