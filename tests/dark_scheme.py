"""The site in Material's dark scheme ("slate"): is every figure still readable?

The figures (docs/figures.py's charts, the TUI's screenshots) draw black text and lines on a
transparent ground, for a white page: on slate's near-black page they vanish. So every image of
a page must sit on a light backdrop (extra.css gives one), and every mermaid diagram, which
the theme colours from the scheme's own variables, must draw its text and lines with enough
contrast against what lies behind them. In either scheme the article's text must stand out
from what it sits on (an inline colour chosen for one scheme can vanish in the other), and
the shadow that tells a reader a code block, formula or table scrolls sideways (extra.css)
must show against its box's ground. ``IN_SLATE`` measures the text and the cues in the page's
light scheme, switches it to slate, measures everything again and switches it back;
``unreadable`` reads what it measured."""

from __future__ import annotations

# WCAG 2's least contrast for large text and for the lines of a graphic (1.4.11).
MIN_CONTRAST = 3.0
# A scroll cue, the shadow at the edge of a box that scrolls sideways, against the box's
# ground. Measured: the scheme's faint ink (extra.css) reads 2.2 on the light page and its grey
# code, 2.5 on slate's; a black shadow on slate's near-black code and page read 1.2 and 1.1,
# a cue nobody sees.
MIN_CUE_CONTRAST = 2.0
# Below this relative luminance a backdrop is dark: black ink on it cannot be read.
DARK = 0.4

IN_SLATE = """async () => {
  const body = document.body;
  const scheme = body.getAttribute("data-md-color-scheme");
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
  // What a box sits on: its own background, else its nearest ancestor's that is opaque
  // (a diagram's, past its shadow root). Remembered for each box until the scheme changes.
  const grounds = new Map();
  const backdrop = e => {
    if (!e) return [255, 255, 255];
    if (!grounds.has(e)) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      const up = e.parentElement || (e.getRootNode && e.getRootNode().host);
      grounds.set(e, opaque(c) ? c : backdrop(up));
    }
    return grounds.get(e);
  };
  const article = document.querySelector("article");
  // The shadow at the edge of a box that scrolls sideways (extra.css): its colour laid over
  // the box's ground at the edge, against that ground. Read for every such box, whether or not
  // it overflows at this width: its style is the same at every width.
  const SCROLLERS = {"pre > code": "code block", "div.arithmatex": "formula",
                     ".md-typeset__scrollwrap": "table"};
  const faintCues = name => {
    const faint = new Set();
    for (const [selector, what] of Object.entries(SCROLLERS)) {
      for (const e of article.querySelectorAll(selector)) {
        const image = getComputedStyle(e).backgroundImage;
        const at = image.indexOf("radial-gradient(");
        const shadow = at < 0 ? null : rgba(image.slice(at).match(/rgba?\\([^)]*\\)/)[0]);
        if (!shadow) continue;  // no cue at all: test_site_browser's uncued check says so
        const ground = backdrop(e), alpha = shadow.length > 3 ? shadow[3] : 1;
        const edge = ground.slice(0, 3).map((g, i) => alpha * shadow[i] + (1 - alpha) * g);
        const ratio = contrast(edge, ground);
        if (ratio < MIN_CUE_CONTRAST) faint.add(`${what} at ${ratio.toFixed(2)} in ${name}`);
      }
    }
    return [...faint];
  };
  // The article's text against what it sits on, its colour's alpha laid over that ground. The
  // diagrams are read below; MathJax draws formulas in the text's own colour.
  const faintText = name => {
    const faint = new Set();
    for (const e of article.querySelectorAll("*")) {
      const own = [...e.childNodes].filter(n => n.nodeType === 3).map(n => n.data).join("");
      if (!own.trim() || e.closest("svg, mjx-container, .mermaid")) continue;
      const style = getComputedStyle(e);
      if (style.visibility === "hidden" || style.opacity === "0" || !e.getClientRects().length)
        continue;  // not shown (a heading's link mark shows on hover only)
      const color = rgba(style.color), under = backdrop(e);
      const alpha = color.length > 3 ? color[3] : 1;
      const ink = under.slice(0, 3).map((g, i) => alpha * color[i] + (1 - alpha) * g);
      const ratio = contrast(ink, under);
      if (ratio < MIN_CONTRAST && faint.size < 3)
        faint.add(`"${own.trim().slice(0, 30)}" at ${ratio.toFixed(2)} in ${name}`);
    }
    return [...faint];
  };
  const text = faintText("light");
  const cues = faintCues("light");
  // The theme fades code's background to the new scheme's over 125 ms: switched with no
  // fading, the colours read are the ones a reader sees a moment later.
  const still = document.head.appendChild(document.createElement("style"));
  still.textContent = "* { transition: none !important }";
  body.setAttribute("data-md-color-scheme", "slate");
  grounds.clear();
  // Two frames, or half a second where no frame comes (a headless tab may draw none): an
  // await that never ends would hold the test, and its worker, for good.
  await new Promise(done => {
    requestAnimationFrame(() => requestAnimationFrame(done));
    setTimeout(done, 500);
  });
  cues.push(...faintCues("slate"));
  text.push(...faintText("slate"));
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
  still.remove();
  return {images, diagrams, cues, text};
}""".replace("MIN_CONTRAST", str(MIN_CONTRAST)).replace("MIN_CUE_CONTRAST", str(MIN_CUE_CONTRAST))


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
    cues = [f"the scroll cue of a {cue}" for cue in found.get("cues", [])]
    text = [f"text {text}" for text in found.get("text", [])]
    return dark + faint + cues + text
