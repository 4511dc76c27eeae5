"""The site's build hooks (docs/hooks/), each against small pages made up for the test: prose
numbers computed where they stand and cached by what could change them, exercise READMEs
rendered with their links rewritten, math written as text in the search index, and names in
inline code given places to wrap."""

from __future__ import annotations

import sys

import pytest
from mkdocs.exceptions import PluginError
from test_docs import DOCS, HOOKS, ROOT, retyped_numbers

sys.path.insert(0, str(HOOKS))  # the build's hooks import each other by name, as mkdocs runs them

import course
import prose_values
from code_breaks import with_breaks
from page_scripts import without_unused_scripts
from prose_values import ProseValues, cache_key, cached_record, fill, placeholders
from search_text import plain, tex_to_text

SITE_URL = "https://example.org/minipaged/"

PAGE = """# A page

The pool has {{ pool.num_free }} free blocks before anything runs.

```python
from minipaged.block_manager import BlockManager

pool = BlockManager(num_gpu_blocks=8, block_size=4)
pool.allocate(0, 9)
```

Now {{ pool.device.num_free }} are free, {{ taken:, }} taken, {{ 1 / 3:.0% }} of a third.

```python
pool.free(0)
taken = 8 - pool.device.num_free
```

```mermaid
flowchart TB
    A["{{ pool.device.num_free }} free"]
```

`{{ not_a_placeholder }}` in code stays, and so does this:

```text
{{ nor_this }}
```
"""


def values_of(page: str) -> list[str]:
    """The page's values, as the build computes them; ``ValueError`` when it would fail."""
    result = prose_values.record(page, "page.md", "page.md")
    if result.failure is not None:
        raise ValueError(result.failure)
    return result.values


def test_a_placeholder_shows_the_state_the_example_above_it_left():
    page = PAGE.replace("{{ pool.num_free }} free blocks before anything runs", "blocks")
    # After the first example 5 of 8 blocks are free; `taken` is defined only by the second,
    # so it waits for it; the diagram's label sees the state after the second example.
    assert values_of(page) == ["5", "0", "33%", "8"]


def test_placeholders_in_code_are_left_alone_and_mermaid_labels_are_filled():
    page = PAGE.replace("{{ pool.num_free }} free blocks before anything runs", "blocks")
    filled = fill(page, "page.md", values_of(page))
    assert "Now 5 are free, 0 taken" in filled and '["8 free"]' in filled
    assert "`{{ not_a_placeholder }}`" in filled and "\n{{ nor_this }}\n" in filled


def test_a_placeholder_that_never_evaluates_names_its_line_and_the_error():
    with pytest.raises(ValueError, match=r"page.md:3: .*pool.num_free.*AttributeError"):
        values_of(PAGE)
    missing = PAGE.replace("pool.num_free", "nowhere")
    with pytest.raises(ValueError, match=r"page.md:3: .*NameError"):
        values_of(missing)


def test_an_example_that_raises_fails_the_build_naming_it():
    page = PAGE.replace("{{ pool.num_free }} free blocks before anything runs", "blocks")
    broken = page.replace("pool.free(0)", "pool.free(99)")
    with pytest.raises(ValueError, match=r"Python example 2 .* raised"):
        values_of(broken)


def test_the_cache_key_changes_with_the_code_the_placeholders_and_their_place():
    page = PAGE.replace("{{ pool.num_free }} free blocks before anything runs", "blocks")
    key = cache_key(page, "page.md", "project")
    assert cache_key(page, "page.md", "project") == key
    assert cache_key(page.replace("9)", "10)"), "page.md", "project") != key
    assert cache_key(page.replace("{{ taken:, }}", "{{ taken }}"), "page.md", "project") != key
    assert cache_key(page, "page.md", "another project") != key
    moved = page.replace("{{ 1 / 3:.0% }} of a third.", "").replace(
        "`{{ not_a_placeholder }}`", "{{ 1 / 3:.0% }} `{{ not_a_placeholder }}`"
    )
    assert cache_key(moved, "page.md", "project") != key, "it now stands after example 2"
    assert cache_key(page + "\nMore prose.\n", "page.md", "project") == key


def test_a_page_runs_once_and_again_when_it_changes(tmp_path, monkeypatch):
    page = PAGE.replace("{{ pool.num_free }} free blocks before anything runs", "blocks")
    runs = []
    real = prose_values.record
    monkeypatch.setattr(prose_values, "record", lambda *args: runs.append(args[1]) or real(*args))
    first = cached_record(page, "page.md", tmp_path, "project", tmp_path / "cache")
    again = cached_record(page, "page.md", tmp_path, "project", tmp_path / "cache")
    assert again == first and first.values[0] == "5" and len(runs) == 1
    changed = page.replace("allocate(0, 9)", "allocate(0, 5)")
    assert (
        cached_record(changed, "page.md", tmp_path, "project", tmp_path / "cache").values[0] == "6"
    )
    assert len(runs) == 2


def test_a_page_whose_example_raised_runs_again(tmp_path, monkeypatch):
    """A failure is not cached: the next build runs the page again (it may have been the
    machine, not the page)."""
    page = PAGE.replace("{{ pool.num_free }} free blocks before anything runs", "blocks")
    broken = page.replace("pool.free(0)", "pool.free(99)")
    runs = []
    real = prose_values.record
    monkeypatch.setattr(prose_values, "record", lambda *args: runs.append(args[1]) or real(*args))
    for _ in range(2):
        failed = cached_record(broken, "page.md", tmp_path, "project", tmp_path / "cache")
        assert "Python example 2 (line" in failed.failure and failed.values is None
    assert len(failed.printed) == 1 and len(runs) == 2


@pytest.mark.parametrize("stored", ["not json", "[]", "{}", '{"key": 1}', '{"values": []}'])
def test_a_cache_entry_that_cannot_be_read_runs_the_page_again(stored, tmp_path):
    page = PAGE.replace("{{ pool.num_free }} free blocks before anything runs", "blocks")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "page-md.json").write_text(stored)
    assert cached_record(page, "page.md", tmp_path, "project", tmp_path / "cache").values[0] == "5"


def test_the_fingerprint_changes_when_a_file_of_the_project_changes(tmp_path):
    (tmp_path / "minipaged").mkdir()
    (tmp_path / "minipaged" / "memory.py").write_text("B = 16\n")
    before = prose_values.fingerprint(tmp_path)
    (tmp_path / "minipaged" / "memory.py").write_text("B = 8\n")
    assert prose_values.fingerprint(tmp_path) != before


def test_placeholders_are_found_only_outside_code():
    found = [expression for _, expression in placeholders(PAGE, "page.md")]
    assert "not_a_placeholder" not in found and "nor_this" not in found
    assert found.count("pool.device.num_free") == 2  # the prose and the diagram


def test_prose_values_evaluates_in_order_even_with_equal_expressions_on_one_line():
    page = "```python\nx = 2\n```\n\n{{ x }} and {{ x }} and {{ x + 1 }}\n"
    prose = ProseValues(page, "p.md")
    assert prose.finish({"x": 2}) == ["2", "2", "3"]


# -- numbers retyped from an Output block ----------------------------------------------------

RETYPED = """```python
print("device block", 3 + 3)
```

```text title="Output"
device block 6
```

It came back as device block (10), then as block 6, with the 4 blocks of `x = 6`.
"""


def test_a_number_the_example_printed_and_the_prose_retyped_is_found():
    found = retyped_numbers(RETYPED, "p.md")
    assert found == ["docs/p.md:9: 6"], "10 is not printed; 4 is not printed; 3 is in the code"
    written = RETYPED.replace("block 6, with", "block {{ 3 + 3 }}, with")
    assert retyped_numbers(written, "p.md") == []


def test_a_new_heading_ends_the_prose_that_reads_an_output():
    later_section = RETYPED.replace("It came back", "## Another command\n\nIt came back")
    assert retyped_numbers(later_section, "p.md") == []


# -- the course's pages -----------------------------------------------------------------------

EXERCISE = ROOT / "tutorials" / "01-block-table-arithmetic"


@pytest.mark.parametrize(
    ("link", "site"),
    [
        ("../../docs/explanation/waste.md", "../explanation/waste.md"),
        (
            "../../docs/explanation/waste.md#external-fragmentation",
            "../explanation/waste.md#external-fragmentation",
        ),
        (SITE_URL + "explanation/waste.html", "../explanation/waste.md"),
        (SITE_URL + "explanation/waste/", "../explanation/waste/index.md"),
        (SITE_URL + "course/03-fork.html#tasks", "../course/03-fork.md#tasks"),
        ("../03-fork/README.md", "03-fork.md"),
        ("../README.md", "index.md"),
        ("starter/memory.py", "#starter-memory-py"),
        ("https://arxiv.org/abs/2309.06180", "https://arxiv.org/abs/2309.06180"),
        ("#hints", "#hints"),
    ],
)
def test_a_readme_link_written_once_lands_on_the_sites_page(link, site):
    assert course.rewrite_link(link, EXERCISE, ROOT, SITE_URL) == site


def test_a_readme_link_the_site_cannot_show_fails_the_build_naming_it():
    with pytest.raises(
        PluginError,
        match=r"01-block-table-arithmetic/README.md links to '\.\./\.\./minipaged/memory.py'",
    ):
        course.rewrite_link("../../minipaged/memory.py", EXERCISE, ROOT, SITE_URL)


def test_every_exercise_page_shows_its_readme_and_every_starter_file():
    for folder in course.exercise_folders(ROOT):
        page = course.exercise_markdown(folder, ROOT, SITE_URL)
        title = (folder / "README.md").read_text().splitlines()[0]
        assert page.startswith(title + "\n")
        for path in course.starter_files(folder):
            assert f'??? example "starter/{path.name}"' in page
            first_line = path.read_text().splitlines()[0]
            assert "    " + first_line in page
        assert "<details>" not in page, "GitHub's hint blocks become the site's collapsible ones"
        assert "../../docs/" not in page


def test_the_course_has_a_page_for_every_exercise_folder():
    folders = [f.name for f in course.exercise_folders(ROOT)]
    assert folders == sorted(folders) and len(folders) >= 12
    assert course.page_of(ROOT / "tutorials" / "03-fork") == "course/03-fork.md"
    assert not (DOCS / "course" / "03-fork.md").exists(), "pages are made at build time"


# -- the search index ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tex", "text"),
    [
        (r"\mathcal{R}[p]", "R[p]"),
        (r"\mathcal{T}_r[\lfloor t/B \rfloor]", "T_r[⌊t/B⌋]"),
        (r"\lceil L/B \rceil", "⌈L/B⌉"),
        (r"\frac{B - 1}{2}", "(B - 1)/2"),
        (r"\mathcal{P}_{\max}", "P_max"),
        (r"2 N_L N_{KV} d_h b", "2 N_L N_KV d_h b"),
        (r"\Delta L", "ΔL"),
        (r"\mathcal{R}[p] \leftarrow \mathcal{R}[p] - 1", "R[p] ← R[p] - 1"),
        (r"C_{\text{total\_free}}", "C_total_free"),
    ],
)
def test_math_in_the_search_index_reads_as_text(tex, text):
    assert tex_to_text(tex) == text


def test_only_math_spans_are_rewritten():
    assert plain(r"refcount \(\mathcal{R}[p]\), and a \[x \le y\]") == "refcount R[p], and a x ≤ y"
    assert plain("no math here") == "no math here"


MATHJAX = (
    '<script src="../assets/javascripts/mathjax-config.js"></script>\n'
    '<script src="../assets/javascripts/vendor/mathjax-3.2.2/tex-svg-full.js"></script>\n'
)
MERMAID = '<script src="../assets/javascripts/vendor/mermaid-11.17.2/mermaid.min.js"></script>\n'
BUNDLE = '<script src="../assets/javascripts/bundle.js"></script>\n'
MATH = '<div class="arithmatex">\\[x\\]</div>'
DIAGRAM = '<pre class="mermaid">graph TD</pre>'


@pytest.mark.parametrize(
    ("body", "kept"),
    [
        ("<p>text</p>", ""),
        (MATH, MATHJAX),
        (DIAGRAM, MERMAID),
        (MATH + DIAGRAM, MATHJAX + MERMAID),
    ],
    ids=["neither", "math", "diagram", "both"],
)
def test_mathjax_and_mermaid_stay_only_on_a_page_that_draws_with_them(body, kept):
    """MathJax's settings go with MathJax; the theme's own scripts always stay."""
    page = f"<article>{body}</article>{BUNDLE}{MATHJAX}{MERMAID}"
    assert without_unused_scripts(page) == f"<article>{body}</article>{BUNDLE}{kept}"


@pytest.mark.parametrize(
    ("html", "shown"),
    [
        ("<td><code>minipaged.chunked_prefill</code></td>",
         "<td><code>minipaged.<wbr>chunked_<wbr>prefill</code></td>"),
        ('<code>preemption="swap"</code>', '<code>preemption=<wbr>"swap"</code>'),
        ('<code class="highlight"><span>f</span><span>(x=1)</span></code>',
         '<code class="highlight"><span>f</span><span>(<wbr>x=<wbr>1)</span></code>'),
        ("<code>__init__</code>, <code>1.5</code>, <code>a / b</code>",
         "<code>__init__</code>, <code>1.5</code>, <code>a / b</code>"),
        ("<pre><span></span><code>a.b_c</code></pre>",
         "<pre><span></span><code>a.b_c</code></pre>"),
        ('<pre class="mermaid"><code>A.b --> C_d</code></pre>',
         '<pre class="mermaid"><code>A.b --> C_d</code></pre>'),
    ],
)  # fmt: skip
def test_inline_code_wraps_at_a_names_joints_and_code_blocks_are_left_alone(html, shown):
    """A joint is a dot or slash between names, underscores inside one, an opening bracket or
    an equals sign; a number's point, a leading or trailing underscore and a block are not."""
    assert with_breaks(html) == shown
