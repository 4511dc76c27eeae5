"""The site in Material's dark scheme ("slate"): is every figure still readable?

The figures (docs/figures.py's charts, the TUI's screenshots) draw black text and lines on a
transparent ground, for a white page: on slate's near-black page they vanish. So every image of
a page must sit on a light backdrop (extra.css gives one), and every mermaid diagram, which
the theme colours from the scheme's own variables, must draw its text and lines with enough
contrast against what lies behind them. ``IN_SLATE`` switches a loaded page to slate, measures
and switches it back; ``unreadable`` reads what it measured."""

from __future__ import annotations

# WCAG 2's least contrast for large text and for the lines of a graphic (1.4.11).
MIN_CONTRAST = 3.0
# Below this relative luminance a backdrop is dark: black ink on it cannot be read.
DARK = 0.4

IN_SLATE = """async () => {
  const body = document.body;
  const scheme = body.getAttribute("data-md-color-scheme");
  body.setAttribute("data-md-color-scheme", "slate");
  await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
  const rgba = s => { const m = (s || "").match(/[\\d.]+/g); return m ? m.map(Number) : null; };
  const opaque = c => c && (c.length < 4 || c[3] > 0.5);
  const luminance = ([r, g, b]) => {
    const f = c => (c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const contrast = (a, b) => {
    const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  };
  // What a box sits on: its own background, else its nearest ancestor's that is opaque.
  const backdrop = e => {
    for (; e; e = e.parentElement || (e.getRootNode && e.getRootNode().host)) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (opaque(c)) return c;
    }
    return [255, 255, 255];
  };
  const article = document.querySelector("article");
  const page = backdrop(article);
  const images = [...article.querySelectorAll("img")].map(img => ({
    src: img.currentSrc || img.src, luminance: luminance(backdrop(img)),
  }));
  const SHAPES = ":scope > rect, :scope > polygon, :scope > circle, :scope > path";
  // Behind an SVG element: the filled shape of the nearest group that has one, else the page.
  const behind = e => {
    for (let g = e.closest("g"); g; g = g.parentElement && g.parentElement.closest("g")) {
      const shape = g.querySelector(SHAPES);
      const fill = shape && rgba(getComputedStyle(shape).fill);
      if (shape && shape !== e && opaque(fill)) return fill;
    }
    return page;
  };
  const diagrams = [];
  for (const host of article.querySelectorAll(".mermaid")) {
    const svg = host.shadowRoot && host.shadowRoot.querySelector("svg");
    if (!svg) continue;
    const faint = [];
    const check = (what, color, ground) => {
      const ratio = contrast(color, ground);
      if (ratio < MIN_CONTRAST) faint.push(`${what} at contrast ${ratio.toFixed(2)}`);
    };
    for (const e of svg.querySelectorAll(":not(style, script, title, desc)")) {
      const text = [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
      const style = getComputedStyle(e);
      if (text && style.visibility !== "hidden" && style.display !== "none") {
        const html = e.namespaceURI !== "http://www.w3.org/2000/svg";
        const own = html ? rgba(style.backgroundColor) : null;
        const ground = opaque(own) ? own : behind(html ? e.closest("foreignObject") : e);
        check(`"${e.textContent.trim().slice(0, 30)}"`, rgba(html ? style.color : style.fill),
              ground);
      } else if (["path", "line", "polyline"].includes(e.localName) && style.fill === "none"
                 && style.stroke !== "none" && parseFloat(style.strokeWidth) > 0) {
        check(`a ${e.localName} (${e.getAttribute("class") || "line"})`, rgba(style.stroke),
              page);
      }
    }
    diagrams.push(faint);
  }
  if (scheme === null) body.removeAttribute("data-md-color-scheme");
  else body.setAttribute("data-md-color-scheme", scheme);
  return {images, diagrams};
}""".replace("MIN_CONTRAST", str(MIN_CONTRAST))


def unreadable(found: dict) -> list[str]:
    """What IN_SLATE found that a reader of the dark scheme cannot read."""
    dark = [
        f"{image['src']} on a dark backdrop (luminance {image['luminance']:.2f})"
        for image in found["images"]
        if image["luminance"] < DARK
    ]
    faint = [
        f"diagram {n + 1}: {', '.join(sorted(set(problems))[:3])}"
        for n, problems in enumerate(found["diagrams"])
        if problems
    ]
    return dark + faint
