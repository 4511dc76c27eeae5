// MathJax settings for pymdownx.arithmatex in generic mode, which wraps inline math in \( \)
// and display math in \[ \], inside elements of class "arithmatex". This file must load before
// vendor/mathjax-*/tex-svg-full.js, which reads window.MathJax when it starts.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    // Typeset only what arithmatex marked; leave code blocks and prose alone.
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
  svg: {
    fontCache: "global",
  },
};
