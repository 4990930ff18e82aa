/**
 * The experiments page of the web view: its HTML, its styles (`/ui/experiments.css`, beside
 * the view's `/ui/app.css`) and its script (`/ui/experiments.js`): nothing inline, as the
 * view's Content-Security-Policy (web.ts) wants. The script lists `/ui/api/experiments`, shows the experiment
 * named in the URL's hash from `/ui/api/experiments/<id>` (refreshed while it runs), and
 * draws its plots as SVG built with DOM calls (no markup from data).
 */
export const EXPERIMENTS_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Kova experiments</title>
<link rel="stylesheet" href="/ui/app.css">
<link rel="stylesheet" href="/ui/experiments.css">
<script src="/ui/experiments.js" defer></script>
</head>
<body>
<h1>Experiments <span id="cluster"></span> <span id="status"></span></h1>
<p class="note"><a href="/ui">cluster view</a></p>
<table id="experiments"><thead><tr><th>experiment</th><th>status</th><th>cells</th><th>subjects</th><th>started</th><th>ended</th></tr></thead><tbody></tbody></table>
<section id="detail" hidden>
<h2 id="detail-title"></h2>
<p id="detail-status" class="note"></p>
<table id="subjects"><thead><tr><th>subject</th><th>score [95% CI]</th><th>pass</th><th>pass@k</th><th>cells</th><th>tokens in / out</th><th>cost</th><th>p50</th><th>p95</th><th>failures</th></tr></thead><tbody></tbody></table>
<div class="plots">
<figure><figcaption>Score per subject (95% CI)</figcaption><svg id="plot-score" role="img" aria-label="score per subject"></svg></figure>
<figure><figcaption>Cost per subject (USD)</figcaption><svg id="plot-cost" role="img" aria-label="cost per subject"></svg></figure>
</div>
<figure><figcaption>Score per task</figcaption><svg id="plot-tasks" role="img" aria-label="score per task"></svg></figure>
</section>
</body>
</html>
`;

/** The page's own styles (`/ui/experiments.css`), beside the view's `/ui/app.css`. */
export const EXPERIMENTS_CSS = `td.num { font-variant-numeric: tabular-nums; }
.note { color: #555; font-size: 12px; }
tr.selected td { background: #eef4fb; }
.plots { display: flex; flex-wrap: wrap; gap: 2rem; }
figure { margin: 1rem 0 0; }
figcaption { font-weight: 600; color: #555; margin-bottom: .25rem; }
svg text { font: 11px system-ui, sans-serif; fill: #1d1d1f; }
.status-completed { color: #1a7f37; } .status-running { color: #0a66c2; }
.status-failed, .status-cancelled { color: #c62828; } .status-budget_exhausted { color: #b26a00; }
`;

export const EXPERIMENTS_SCRIPT = `"use strict";
(() => {
  const $ = (s) => document.querySelector(s);
  const SVG = "http://www.w3.org/2000/svg";
  const ENDED = ["completed", "budget_exhausted", "cancelled", "failed"];
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  function cells(tr, values) { for (const v of values) tr.append(v instanceof Node ? (() => { const td = el("td"); td.append(v); return td; })() : el("td", {}, v)); return tr; }
  const fmt = (x, d = 3) => (x === null || x === undefined ? "-" : Number(x).toFixed(d));
  function money(v) { if (typeof v !== "number") return "-"; return v === 0 ? "$0" : v >= 0.01 ? "$" + v.toFixed(4) : "$" + String(Number(v.toPrecision(2))); }
  function ms(v) { if (v === null || v === undefined) return "-"; return v < 1000 ? Math.round(v) + " ms" : (v / 1000).toFixed(1) + " s"; }
  const when = (t) => (t ? new Date(t).toLocaleString() : "-");
  let selected = decodeURIComponent(location.hash.slice(1));
  let detailTimer;

  async function loadList() {
    try {
      const r = await fetch("/ui/api/experiments", { credentials: "same-origin" });
      if (!r.ok) { $("#status").textContent = "(" + r.status + ")"; return; }
      const v = await r.json();
      $("#cluster").textContent = v.cluster;
      $("#status").textContent = "updated " + new Date(v.at).toLocaleTimeString();
      const body = $("#experiments tbody");
      body.replaceChildren();
      if (v.experiments.length === 0) body.append(cells(el("tr"), ["none", "", "", "", "", ""]));
      for (const x of v.experiments) {
        const a = el("a", { href: "#" + encodeURIComponent(x.experimentId) }, x.experimentId);
        const tr = cells(el("tr", { "data-experiment": x.experimentId, class: x.experimentId === selected ? "selected" : "" }), [a, el("span", { class: "status-" + x.status }, x.status), String(x.cells), x.subjects.join(", "), when(x.startedAt), when(x.endedAt)]);
        body.append(tr);
      }
    } catch (err) {
      $("#status").textContent = "(" + err + ")";
    }
  }

  function subjectRow(r, s) {
    const passK = Object.entries(s.passAtK).map(([k, v]) => "@" + k + " " + fmt(v)).join("  ") || "-";
    const cellsText = s.scored + "/" + s.cells + (s.errors ? " (" + s.errors + " err)" : "") + (s.unfinished ? " (" + s.unfinished + " not run)" : "");
    const judge = s.judgeUsage.inputTokens + s.judgeUsage.outputTokens > 0 ? " + judge " + money(s.judgeUsage.costUsd) : "";
    const failures = Object.entries(s.failures).map(([c, n]) => c + " ×" + n).join(", ") || "-";
    return cells(el("tr", { "data-subject": s.subject }), [
      s.subject,
      fmt(s.meanScore) + (s.ci95 ? " [" + fmt(s.ci95[0]) + ", " + fmt(s.ci95[1]) + "]" : ""),
      fmt(s.passRate),
      passK,
      cellsText,
      s.usage.inputTokens + " / " + s.usage.outputTokens,
      money(s.usage.costUsd) + judge,
      ms(s.latencyMs && s.latencyMs.p50),
      ms(s.latencyMs && s.latencyMs.p95),
      failures,
    ]);
  }

  /** Horizontal bars, one per subject; whiskers for an interval when given. */
  function bars(svg, rows, max, label) {
    const W = 260, left = 90, rowH = 22;
    svg.replaceChildren();
    svg.setAttribute("width", String(left + W + 80));
    svg.setAttribute("height", String(rows.length * rowH + 24));
    const scale = (x) => left + (max > 0 ? (x / max) * W : 0);
    svg.append(svgEl("line", { x1: left, y1: 0, x2: left, y2: rows.length * rowH, stroke: "#8e8e93" }));
    rows.forEach((r, i) => {
      const y = i * rowH + 4;
      svg.append(svgEl("text", { x: left - 6, y: y + 12, "text-anchor": "end" }, r.name));
      const bar = svgEl("rect", { class: "bar", x: left, y, width: Math.max(0, scale(r.value) - left), height: rowH - 8, fill: "#0a66c2", "data-subject": r.name, "data-value": r.value });
      bar.append(svgEl("title", {}, r.name + ": " + label(r.value)));
      svg.append(bar);
      if (r.lo !== undefined) svg.append(svgEl("line", { class: "ci", x1: scale(r.lo), x2: scale(r.hi), y1: y + (rowH - 8) / 2, y2: y + (rowH - 8) / 2, stroke: "#1d1d1f", "stroke-width": 2, "data-subject": r.name }));
      svg.append(svgEl("text", { x: scale(Math.max(r.value, r.hi ?? 0)) + 6, y: y + 12 }, label(r.value)));
    });
    svg.append(svgEl("text", { x: left, y: rows.length * rowH + 16 }, "0"));
    svg.append(svgEl("text", { x: left + W, y: rows.length * rowH + 16, "text-anchor": "end" }, label(max)));
  }

  /** Tasks × subjects: a cell per task and subject, coloured by score (red 0 → green 1, grey when not scored). */
  function heatmap(svg, report) {
    const subjects = report.subjects.map((s) => s.subject);
    const left = 90, top = 8, cw = Math.max(10, Math.min(28, Math.floor(900 / Math.max(1, report.perTask.length)))), ch = 20;
    svg.replaceChildren();
    svg.setAttribute("width", String(left + cw * report.perTask.length + 10));
    svg.setAttribute("height", String(top + ch * subjects.length + 50));
    subjects.forEach((s, j) => svg.append(svgEl("text", { x: left - 6, y: top + j * ch + 14, "text-anchor": "end" }, s)));
    report.perTask.forEach((t, i) => {
      subjects.forEach((s, j) => {
        const v = t.scores[s];
        const fill = v === null || v === undefined ? "#d1d1d6" : "hsl(" + Math.round(v * 120) + ", 60%, 45%)";
        const rect = svgEl("rect", { class: "task-cell", x: left + i * cw, y: top + j * ch, width: cw - 1, height: ch - 1, fill, "data-task": t.task, "data-subject": s, "data-score": v === null || v === undefined ? "" : v });
        rect.append(svgEl("title", {}, t.task + " · " + s + ": " + fmt(v)));
        svg.append(rect);
      });
      if (report.perTask.length <= 40) svg.append(svgEl("text", { x: left + i * cw + cw / 2, y: top + ch * subjects.length + 12, "text-anchor": "end", transform: "rotate(-45 " + (left + i * cw + cw / 2) + " " + (top + ch * subjects.length + 12) + ")" }, t.task));
    });
  }

  async function loadDetail() {
    clearTimeout(detailTimer);
    if (!selected) { $("#detail").hidden = true; return; }
    const r = await fetch("/ui/api/experiments/" + encodeURIComponent(selected), { credentials: "same-origin" });
    $("#detail").hidden = false;
    $("#detail-title").textContent = selected;
    if (!r.ok) { $("#detail-status").textContent = r.status === 404 ? "no such experiment" : "(" + r.status + ")"; $("#subjects tbody").replaceChildren(); return; }
    const { report, status } = await r.json();
    const stop = report.stopReason ? " (" + report.stopReason.message + ")" : "";
    $("#detail-status").replaceChildren(el("span", { class: "status-" + report.status, id: "detail-state" }, report.status), document.createTextNode(stop + " · " + report.subjects.length + " subjects × " + report.tasks + " tasks × " + report.repetitions + " repetitions = " + report.cells + " cells" + (status && status.description ? " · " + status.description : "")));
    $("#subjects tbody").replaceChildren(...report.subjects.map((s) => subjectRow(report, s)));
    bars($("#plot-score"), report.subjects.map((s) => ({ name: s.subject, value: s.meanScore ?? 0, lo: s.ci95 ? s.ci95[0] : undefined, hi: s.ci95 ? s.ci95[1] : undefined })), 1, (v) => fmt(v));
    const costs = report.subjects.map((s) => ({ name: s.subject, value: (s.usage.costUsd ?? 0) + (s.judgeUsage.costUsd ?? 0) }));
    bars($("#plot-cost"), costs, Math.max(...costs.map((c) => c.value), 0), money);
    heatmap($("#plot-tasks"), report);
    if (!ENDED.includes(report.status)) detailTimer = setTimeout(loadDetail, 2000);
  }

  window.addEventListener("hashchange", () => { selected = decodeURIComponent(location.hash.slice(1)); void loadList(); void loadDetail(); });
  void loadList();
  void loadDetail();
  setInterval(loadList, 5000);
})();
`;
