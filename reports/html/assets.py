"""The report's style sheet and the script of the table (files under DIR/assets/).

The script is plain ES5-level JavaScript with no library.  The view switch (the ordinary
domain or the whole range, reports/views.py) sets ``data-view`` on the body, which the style
sheet uses to show the texts of that view (``only-ordinary``, ``only-whole``), swaps the
fills of the heat map's cells (their ``data-ordinary`` and ``data-whole``) and tells the
table.  The table reads ``window.ROUNDOFF_TABLE`` (assets/rows.js: the whole range's
numbers in ``rows``, the ordinary domain's in ``ordinary``), filters, sorts and shows
``pageRows`` rows at a time.  Cells are filled with ``textContent`` and links with ``href``
attributes from the report itself, so no data is ever parsed as HTML.
"""

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 1.5em 3em; color: #111; }
header h1 { margin: .4em 0 .2em; }
nav a { margin-right: .3em; }
h2 { border-bottom: 1px solid #ccc; margin-top: 1.6em; }
code, pre { font: 12px/1.35 ui-monospace, monospace; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; }
dl.meta, dl.metrics { display: grid; grid-template-columns: max-content 1fr; gap: .15em 1em; }
dl.metrics { grid-template-columns: repeat(2, max-content 1fr); font-size: 13px; }
dt { font-weight: 600; } dd { margin: 0; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
table.num td { font-variant-numeric: tabular-nums; }
th button { font: inherit; font-weight: 600; background: none; border: 0; padding: 0;
            cursor: pointer; text-align: left; }
th[aria-sort="descending"] button::after { content: " \\25BC"; }
th[aria-sort="ascending"] button::after { content: " \\25B2"; }
tr.error td, div.row.error { background: #fde0dc; }
tr.no_rule td, tr.not_differentiable td { color: #555; }
.bad { color: #b2182b; font-weight: 600; } .good { color: #1a7837; font-weight: 600; }
.note { color: #555; font-style: italic; }
.scroll { overflow-x: auto; max-width: 100%; }
.controls { margin: .5em 0; } .controls input { width: 22em; }
.pager { margin: .5em 0; }
figure { margin: .5em 1em .5em 0; display: inline-block; vertical-align: top; }
figure.wide { display: block; }
figcaption { font-size: 12px; color: #333; max-width: 360px; }
figure.wide figcaption { max-width: 60em; }
svg text.tick { font-size: 9px; } svg text.axis { font-size: 10px; }
svg text.family { font-size: 9px; font-weight: 600; fill: #444; }
svg.heatmap a:hover rect, svg.heatmap a:focus rect { stroke: #000; stroke-width: 1.5; }
div.row { border: 1px solid #ddd; padding: .3em .8em; margin: .6em 0; }
div.row.missing { background: #f4f4f4; }
div.row:target { outline: 3px solid #31688e; }
section.fmt:target h3 { background: #fde725; }
span.status { font-size: 12px; border: 1px solid #999; padding: 0 4px; border-radius: 3px; }
span.status.error { background: #b2182b; color: #fff; }
span.status.convention { background: #fee08b; }
ul.evidence { font-size: 12px; color: #444; }
.viewbar { position: sticky; top: 0; z-index: 5; background: #fff; padding: .35em 0;
           border-bottom: 1px solid #ccc; }
.viewbar label { margin-right: .5em; } .viewbar #view-said { color: #333; }
body[data-view="ordinary"] .only-whole, body[data-view="whole"] .only-ordinary {
  display: none; }
p.over { margin: .5em 0 .1em; font-weight: 600; font-size: 13px; }
div.breakdown, p.breakdown { margin: .3em 0; font-size: 13px; }
div.breakdown ul { margin: .1em 0; }
h5 { margin: .5em 0 .2em; }
table.kinds td, table.buckets td, table.kinds th, table.buckets th { white-space: nowrap; }
table.kinds td:last-child { white-space: normal; }
figure.byinput figcaption { max-width: 480px; }
"""

JS = r"""
(function () {
  "use strict";
  // The view switch: the ordinary domain or the whole range.
  var bar = document.getElementById("view-bar");
  if (!bar) { return; }
  var inputs = bar.querySelectorAll("input[name=view]");
  function set(view) {
    document.body.setAttribute("data-view", view);
    var cells = document.querySelectorAll("svg.heatmap rect[data-" + view + "]");
    Array.prototype.forEach.call(cells, function (r) {
      r.setAttribute("fill", r.getAttribute("data-" + view));
    });
    document.dispatchEvent(new CustomEvent("roundoff-view", { detail: view }));
  }
  Array.prototype.forEach.call(inputs, function (input) {
    input.addEventListener("change", function () { if (input.checked) { set(input.value); } });
  });
  var checked = bar.querySelector("input[name=view]:checked");
  if (checked) { set(checked.value); }
})();

(function () {
  "use strict";
  var data = window.ROUNDOFF_TABLE;
  var table = document.getElementById("rows");
  if (!data || !table) { return; }
  var cols = data.columns, link = cols.length;
  var statusCol = indexOf("status"), formatCol = indexOf("format");
  var numeric = cols.map(function (c) { return c.type === "num"; });
  // The rows of each view: the whole range's as stored, the ordinary domain's with the
  // view's columns replaced.
  var byView = { whole: data.rows };
  if (data.ordinary) {
    var at = (data.viewColumns || []).map(indexOf);
    byView.ordinary = data.rows.map(function (r, i) {
      var copy = r.slice();
      at.forEach(function (c, j) { if (c >= 0) { copy[c] = data.ordinary[i][j]; } });
      return copy;
    });
  }
  var rows, text;
  function useView(view) {
    rows = byView[view] || byView.whole;
    text = rows.map(function (r) { return r.slice(0, link).join(" ").toLowerCase(); });
  }
  useView(document.body.getAttribute("data-view") || data.view);
  var order = rows.map(function (_, i) { return i; });
  var shown = order, page = 0, sortCol = -1, sortDir = 0;

  function indexOf(key) {
    for (var i = 0; i < cols.length; i++) { if (cols[i].key === key) { return i; } }
    return -1;
  }
  // Numbers of the results file: null (no value) and "nan" sort last in both directions.
  function num(v) {
    if (v === null || v === undefined || v === "nan") { return null; }
    if (v === "inf") { return Infinity; }
    if (v === "-inf") { return -Infinity; }
    return typeof v === "number" ? v : null;
  }
  function show(v, c) {
    if (v === null || v === undefined || v === "") { return ""; }
    if (!numeric[c]) { return String(v); }
    var x = num(v);
    if (x === null) { return "NaN"; }
    if (x === Infinity) { return "\u221e"; }
    if (x === -Infinity) { return "\u2212\u221e"; }
    if (x === 0 || Number.isInteger(x)) { return String(x); }
    return Number(x.toPrecision(3)).toString();
  }
  function compare(a, b) {
    var x = rows[a][sortCol], y = rows[b][sortCol];
    if (numeric[sortCol]) {
      x = num(x); y = num(y);
      if (x === null || y === null) {
        return x === y ? a - b : (x === null ? 1 : -1);
      }
      return x === y ? a - b : (x < y ? -sortDir : sortDir);
    }
    x = x === null ? "" : String(x); y = y === null ? "" : String(y);
    var c = x.localeCompare(y);
    return c === 0 ? a - b : c * sortDir;
  }
  function apply() {
    var words = document.getElementById("filter").value.toLowerCase().split(/\s+/)
      .filter(function (w) { return w.length > 0; });
    var st = document.getElementById("status-filter").value;
    var fm = document.getElementById("format-filter").value;
    shown = order.filter(function (i) {
      var r = rows[i];
      if (st && r[statusCol] !== st) { return false; }
      if (fm && r[formatCol] !== fm) { return false; }
      for (var k = 0; k < words.length; k++) {
        if (text[i].indexOf(words[k]) < 0) { return false; }
      }
      return true;
    });
    if (sortCol >= 0) { shown.sort(compare); }
    page = 0;
    render();
  }
  function render() {
    var n = data.pageRows, pages = Math.max(1, Math.ceil(shown.length / n));
    page = Math.min(page, pages - 1);
    var body = document.createElement("tbody");
    shown.slice(page * n, page * n + n).forEach(function (i) {
      var r = rows[i], tr = document.createElement("tr");
      tr.className = String(r[statusCol]);
      for (var c = 0; c < link; c++) {
        var td = document.createElement("td");
        td.setAttribute("data-key", cols[c].key);
        if (numeric[c] && r[c] !== null) { td.setAttribute("data-v", String(r[c])); }
        if (c === 0) {
          var a = document.createElement("a");
          a.href = r[link]; a.textContent = String(r[c]);
          td.appendChild(a);
        } else {
          td.textContent = show(r[c], c);
        }
        tr.appendChild(td);
      }
      body.appendChild(tr);
    });
    table.replaceChild(body, table.tBodies[0]);
    document.getElementById("table-count").textContent = shown.length + " of " +
      rows.length + " rows";
    document.getElementById("page").textContent = "page " + (page + 1) + " of " + pages;
    document.getElementById("prev").disabled = page === 0;
    document.getElementById("next").disabled = page >= pages - 1;
  }
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, c) {
    th.querySelector("button").addEventListener("click", function () {
      // First click: numbers largest first, text A to Z; a second click reverses.
      var first = numeric[c] ? -1 : 1;
      sortDir = sortCol === c ? -sortDir : first;
      sortCol = c;
      Array.prototype.forEach.call(heads, function (h) { h.setAttribute("aria-sort", "none"); });
      th.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
      shown.sort(compare);
      page = 0;
      render();
    });
  });
  ["filter", "status-filter", "format-filter"].forEach(function (id) {
    document.getElementById(id).addEventListener("input", apply);
  });
  document.addEventListener("roundoff-view", function (e) { useView(e.detail); apply(); });
  document.getElementById("prev").addEventListener("click", function () { page--; render(); });
  document.getElementById("next").addEventListener("click", function () { page++; render(); });
  render();
})();
"""
