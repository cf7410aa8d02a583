// MathJax 3 for pymdownx.arithmatex (generic mode) and for the $…$ of the rendered notebooks.
// The whole page is processed (code and pre blocks are skipped by MathJax's defaults), because the
// notebooks' markdown cells hold their math in plain <p> elements, not in arithmatex spans.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true,
  },
};
document$.subscribe(() => {
  MathJax.startup.output.clearCache();
  MathJax.typesetClear();
  MathJax.texReset();
  MathJax.typesetPromise();
});
