// Exercise solutions start collapsed on the site, as they do in Jupyter: mkdocs-jupyter gives each code
// cell tagged `solution` the class celltag_solution, and this wraps the cell (code and output) in a
// <details> element, so the learner reads the prediction before the answer.
document$.subscribe(() => {
  document.querySelectorAll(".jp-Cell.celltag_solution").forEach((cell) => {
    // mkdocs-jupyter nests two elements with the class; wrap only the outer one, once.
    if (cell.parentElement.closest(".celltag_solution, details.solution")) return;
    const details = document.createElement("details");
    details.className = "solution";
    const summary = document.createElement("summary");
    summary.textContent = "Solution (click to show the check and its output)";
    details.appendChild(summary);
    cell.parentNode.insertBefore(details, cell);
    details.appendChild(cell);
  });
});
