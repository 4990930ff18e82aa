/**
 * The web view's page: plain HTML, CSS and JavaScript, so the gateway serves it without a
 * build step or a static directory. No script or style is inline: the pages load
 * `/ui/app.js`, `/ui/login.js` and `/ui/app.css`, so their Content-Security-Policy
 * (web.ts) allows scripts and styles from the gateway's own origin only. The script polls
 * `/ui/api/cluster` every 2 s and folds a session's SSE events into a run tree.
 */
export const WEB_VIEW_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Kova</title>
<link rel="stylesheet" href="/ui/app.css">
<script src="/ui/app.js" defer></script>
</head>
<body>
<h1>Kova cluster <span id="cluster"></span> <span id="status"></span></h1>
<p><a href="/ui/experiments">experiments</a></p>
<h2>Nodes</h2>
<table id="nodes"><thead><tr><th>node</th><th>state</th><th>heartbeat age</th><th>actors</th><th>version</th><th>host</th></tr></thead><tbody></tbody></table>
<h2>Agents</h2>
<table id="agents"><thead><tr><th>agent</th><th>type</th><th>state</th><th>node</th><th>backlog</th><th>usage (in / out tokens, cost)</th></tr></thead><tbody></tbody></table>
<h2>Dead letters</h2>
<table id="dlq"><thead><tr><th>reason</th><th>messages</th></tr></thead><tbody></tbody></table>
<h2>Session</h2>
<form id="session-form"><input id="session-id" placeholder="session id" autocomplete="off"> <button>watch</button></form>
<div id="session-status"></div>
<ul class="tree" id="tree"></ul>
</body>
</html>
`;

/** The page's styles (`/ui/app.css`), the login page's included. */
export const WEB_VIEW_CSS = `  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1d1d1f; }
  h1 { font-size: 1.3rem; margin: 0 0 1rem; }
  h2 { font-size: 1.05rem; margin: 1.5rem 0 .5rem; }
  table { border-collapse: collapse; min-width: 40rem; }
  th, td { text-align: left; padding: .25rem .75rem .25rem 0; border-bottom: 1px solid #e5e5ea; }
  th { font-weight: 600; color: #555; }
  .live { color: #1a7f37; } .dead { color: #c62828; }
  ul.tree, ul.tree ul { list-style: none; padding-left: 1.25rem; margin: 0; }
  ul.tree { padding-left: 0; }
  .run { margin: .3rem 0; padding: .35rem .6rem; border-left: 3px solid #8e8e93; background: #f5f5f7; }
  .run[data-status="completed"] { border-color: #1a7f37; }
  .run[data-status="failed"] { border-color: #c62828; }
  .run[data-status="cancelled"] { border-color: #b26a00; }
  .run[data-status="running"] { border-color: #0a66c2; }
  .run .meta { color: #555; font-size: 12px; }
  .tools { font-size: 12px; color: #333; }
  input { font: inherit; padding: .2rem .4rem; width: 22rem; }
  #status { color: #555; font-size: 12px; }
body.login { font: 14px/1.4 system-ui, sans-serif; margin: 3rem; } body.login input { font: inherit; width: 28rem; padding: .3rem; }
`;

/** The page's script (`/ui/app.js`). */
export const WEB_VIEW_JS = `"use strict";
const $ = (s) => document.querySelector(s);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
function row(cells) { return "<tr>" + cells.map((c) => "<td>" + c + "</td>").join("") + "</tr>"; }
// A model call costs fractions of a cent: below one cent show two significant digits, not $0.0000.
function money(v) { return "$" + (v >= 0.01 ? v.toFixed(4) : String(Number(v.toPrecision(2)))); }
function usage(u) { if (!u) return ""; const cost = typeof u.costUsd === "number" ? " " + money(u.costUsd) : ""; return esc(u.inputTokens ?? 0) + " / " + esc(u.outputTokens ?? 0) + cost; }
async function refresh() {
  try {
    const r = await fetch("/ui/api/cluster", { credentials: "same-origin" });
    if (!r.ok) { $("#status").textContent = "(" + r.status + ")"; return; }
    const v = await r.json();
    $("#cluster").textContent = v.cluster;
    $("#status").textContent = "updated " + new Date(v.at).toLocaleTimeString();
    $("#nodes tbody").innerHTML = v.nodes.map((n) => row([esc(n.id), '<span class="' + (n.live ? "live" : "dead") + '">' + esc(n.state) + (n.live ? "" : " (silent)") + "</span>", (n.heartbeatAgeMs / 1000).toFixed(1) + " s", esc(n.actors), esc(n.version), esc(n.host)])).join("");
    $("#agents tbody").innerHTML = v.agents.map((a) => row([esc(a.id), esc(a.type), esc(a.state), esc(a.node ?? "unplaced"), a.backlog == null ? "" : esc(a.backlog), usage(a.usage)])).join("");
    const reasons = Object.entries(v.dlq);
    $("#dlq tbody").innerHTML = reasons.length ? reasons.map(([k, n]) => row([esc(k), esc(n)])).join("") : row(["none", "0"]);
  } catch (e) { $("#status").textContent = "(offline)"; }
}
refresh();
setInterval(refresh, 2000);

// The run tree: one node per run, children by parentRunId / child_run_linked.
let runs = new Map();
let source;
function run(id) {
  let r = runs.get(id);
  if (!r) { r = { id, status: "pending", tools: [], children: new Set(), tokens: 0, inputTokens: 0, outputTokens: 0 }; runs.set(id, r); }
  return r;
}
function link(child, parent) { if (!parent || child === parent) return; run(child).parent = parent; run(parent).children.add(child); }
// A run's end event carries its totals (docs/protocol.md, "Agent runs"): they replace the sums of its model calls.
function totals(r, u) { if (!u) return; r.inputTokens = u.inputTokens ?? r.inputTokens; r.outputTokens = u.outputTokens ?? r.outputTokens; if (typeof u.costUsd === "number") r.cost = u.costUsd; }
function fold(e) {
  const r = run(e.runId);
  const d = e.data || {};
  if (e.parentRunId) link(e.runId, e.parentRunId);
  switch (e.type) {
    case "run_started": r.status = "running"; r.agentId = d.agentId; r.start = e.ts; r.input = d.input; break;
    case "model_delta": r.tokens += d.chars || 0; break;
    case "model_response": r.model = d.model; if (d.usage) { r.inputTokens += d.usage.inputTokens || 0; r.outputTokens += d.usage.outputTokens || 0; } if (typeof d.costUsd === "number") r.cost = (r.cost || 0) + d.costUsd; break;
    case "tool_call": r.tools.push({ callId: d.callId, tool: d.tool, ok: undefined }); break;
    case "tool_result": { const t = r.tools.find((x) => x.callId === d.callId); if (t) t.ok = d.ok; else r.tools.push({ callId: d.callId, tool: d.tool, ok: d.ok }); break; }
    case "child_run_linked": link(d.childRunId, e.runId); break;
    case "approval_requested": r.status = "waiting for approval"; break;
    case "run_completed": r.status = "completed"; r.end = e.ts; totals(r, d.usage); break;
    case "run_failed": r.status = "failed"; r.end = e.ts; r.error = d.error && d.error.message; totals(r, d.usage); break;
    case "run_cancelled": r.status = "cancelled"; r.end = e.ts; totals(r, d.usage); break;
    case "run_stream_end": if (!r.end) { r.end = e.ts; r.status = d.status || r.status; } break;
  }
}
function render() {
  const roots = [...runs.values()].filter((r) => !r.parent || !runs.has(r.parent)).sort((a, b) => (a.start || 0) - (b.start || 0));
  $("#tree").innerHTML = roots.map(renderRun).join("");
}
function renderRun(r) {
  const dur = r.start ? (((r.end || Date.now()) - r.start) / 1000).toFixed(2) + " s" : "";
  const cost = typeof r.cost === "number" ? ", " + money(r.cost) : "";
  const tools = r.tools.length ? '<div class="tools">tools: ' + r.tools.map((t) => esc(t.tool) + (t.ok === undefined ? " …" : t.ok ? " ✓" : " ✗")).join(", ") + "</div>" : "";
  const kids = [...r.children].map((c) => runs.get(c)).filter(Boolean).sort((a, b) => (a.start || 0) - (b.start || 0));
  return '<li><div class="run" data-run-id="' + esc(r.id) + '" data-status="' + esc(r.status) + '" data-agent="' + esc(r.agentId) + '">' +
    "<strong>" + esc(r.agentId || "?") + "</strong> " + '<span class="run-status">' + esc(r.status) + "</span>" +
    '<div class="meta">run ' + esc(r.id) + (r.model ? " · model " + esc(r.model) : "") + " · tokens " + r.inputTokens + " in / " + r.outputTokens + " out" + cost + (dur ? " · " + dur : "") + (r.error ? " · " + esc(r.error) : "") + "</div>" + tools + "</div>" +
    (kids.length ? '<ul class="children">' + kids.map(renderRun).join("") + "</ul>" : "") + "</li>";
}
function watch(sessionId) {
  if (source) source.close();
  runs = new Map();
  render();
  if (!sessionId) return;
  $("#session-status").textContent = "session " + sessionId;
  source = new EventSource("/ui/api/sessions/" + encodeURIComponent(sessionId) + "/events");
  let pending = false;
  source.onmessage = (m) => { fold(JSON.parse(m.data)); if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; render(); }); } };
  source.addEventListener("caught_up", () => { $("#session-status").textContent = "session " + sessionId + " (live)"; });
}
$("#session-form").addEventListener("submit", (e) => { e.preventDefault(); const id = $("#session-id").value.trim(); location.hash = id; });
window.addEventListener("hashchange", () => watch(decodeURIComponent(location.hash.slice(1))));
if (location.hash.length > 1) { $("#session-id").value = decodeURIComponent(location.hash.slice(1)); watch(decodeURIComponent(location.hash.slice(1))); }
`;

/**
 * The login page: stores the key in a cookie for the web view's own GETs (the only
 * requests that accept it; SameSite=Strict). It shows no cluster data.
 */
export const LOGIN_HTML = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Kova: sign in</title>
<link rel="stylesheet" href="/ui/app.css">
<script src="/ui/login.js" defer></script></head>
<body class="login">
<h1>Kova web view</h1>
<form id="f"><label>API key <input id="k" type="password" autocomplete="off"></label> <button>open</button></form>
<p>Create a key with <code>kova gateway keys add &lt;name&gt;</code>. It is kept in a cookie for this page only.</p>
</body>
</html>
`;

/** The login page's script (`/ui/login.js`). */
export const LOGIN_JS = `"use strict";
document.getElementById("f").addEventListener("submit", (e) => {
  e.preventDefault();
  const key = document.getElementById("k").value.trim();
  document.cookie = "kova_key=" + encodeURIComponent(key) + "; Path=/ui; SameSite=Strict" + (location.protocol === "https:" ? "; Secure" : "");
  location.href = "/ui";
});
`;
