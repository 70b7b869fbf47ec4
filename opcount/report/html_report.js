// opcount's HTML report: the module tree's expand/collapse-all buttons and the sortable tables.
// The tree itself folds with <details>, so it works with this script blocked too.
(function () {
  "use strict";

  document.querySelectorAll("button[data-tree]").forEach(function (button) {
    button.addEventListener("click", function () {
      var open = button.getAttribute("data-tree") === "expand";
      document.querySelectorAll("#tree details").forEach(function (node) {
        node.open = open;
      });
    });
  });

  // A cell's value is its data-v attribute: exact numbers, so "1.2 K" and "980" sort as numbers.
  function cellValue(row, index, numeric) {
    var text = row.cells[index].getAttribute("data-v");
    if (!numeric) return text || "";
    return text === "" || text === null ? null : Number(text);
  }

  function sortBy(table, th) {
    var index = th.cellIndex;
    var numeric = th.getAttribute("data-type") === "number";
    var current = th.getAttribute("aria-sort");
    // First click: numbers largest first, names A to Z; a second click reverses.
    var descending = current ? current === "ascending" : numeric;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, index, numeric);
      var y = cellValue(b, index, numeric);
      if (x === null || y === null) return (x === null) - (y === null); // blanks last either way
      var order = numeric ? x - y : x < y ? -1 : x > y ? 1 : 0; // names in code-point order
      return descending ? -order : order;
    });
    rows.forEach(function (row) {
      body.appendChild(row);
    });
    Array.prototype.forEach.call(th.parentNode.cells, function (cell) {
      cell.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }

  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.tabIndex = 0;
      th.addEventListener("click", function () {
        sortBy(table, th);
      });
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          sortBy(table, th);
        }
      });
    });
  });
})();
