"""The GPU web app's page at `/`: inline CSS and JS, no external fetch (it works offline).
Served by web_handlers.py; components/app/files/gpu_web_app.py is the app."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GPU web app</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }
  main { max-width: 980px; margin: 0 auto; padding: 20px; display: grid; gap: 16px;
         grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); }
  header { grid-column: 1 / -1; }
  h1 { margin: 0 0 4px; font-size: 22px; }
  h2 { margin: 0 0 10px; font-size: 16px; }
  section { background: #fff; border: 1px solid #d8dce3; border-radius: 8px; padding: 16px; }
  button { font: inherit; font-weight: 600; padding: 8px 22px; border-radius: 6px; border: 0;
           background: #2457c5; color: #fff; cursor: pointer; }
  button:disabled { background: #8a9bbf; cursor: wait; }
  .muted { color: #5c6578; font-size: 13px; }
  .badge { display: inline-block; padding: 2px 10px; border-radius: 10px; font-weight: 700; font-size: 13px; }
  .badge.gpu { background: #d8f5df; color: #135c25; }
  .badge.cpu-fallback { background: #fff0c2; color: #6b4a00; }
  .notice { padding: 8px 12px; border-radius: 6px; margin: 10px 0 0; }
  .notice.error { background: #fde2e1; color: #8a1c14; }
  .notice.busy { background: #fff0c2; color: #6b4a00; }
  dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 12px; margin: 12px 0; }
  dt { color: #5c6578; }
  dd { margin: 0; }
  pre { background: #10141c; color: #e6e9ef; padding: 12px; border-radius: 6px; overflow: auto;
        max-height: 360px; white-space: pre-wrap; word-break: break-word; margin: 0; }
  table { border-collapse: collapse; width: 100%; font-size: 14px; }
  th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid #e6e8ee; }
  section.wide { grid-column: 1 / -1; }
  #gpu-chart { width: 100%; height: auto; display: block; }
  #gpu-chart .axis { stroke: #8a93a6; stroke-width: 1; }
  #gpu-chart .grid { stroke: #e6e8ee; stroke-width: 1; }
  #gpu-chart .total { fill: none; stroke: #8a93a6; stroke-width: 1.5; stroke-dasharray: 5 4; }
  #gpu-chart .allocated { fill: rgba(36, 87, 197, 0.15); stroke: #2457c5; stroke-width: 2; }
  #gpu-chart text { font: 12px system-ui, sans-serif; fill: #5c6578; }
  [hidden] { display: none !important; }
</style>
</head>
<body>
<main>
  <header>
    <h1>GPU web app</h1>
    <div class="muted" id="about">Loading&hellip;</div>
  </header>
  <section aria-labelledby="run-title">
    <h2 id="run-title">Run a GPU job</h2>
    <button id="run" type="button">Run</button>
    <span class="muted" id="running" hidden>running&hellip;</span>
    <div id="notice" class="notice" role="status" hidden></div>
    <div id="result" hidden>
      <dl>
        <dt>Mode</dt><dd><span id="mode" class="badge"></span></dd>
        <dt>Device</dt><dd id="device"></dd>
        <dt>Duration</dt><dd id="duration"></dd>
        <dt>Exit code</dt><dd id="returncode"></dd>
        <dt id="reason-label" hidden>Why</dt><dd id="reason" hidden></dd>
      </dl>
      <pre id="output"></pre>
    </div>
  </section>
  <section aria-labelledby="cluster-title">
    <h2 id="cluster-title">Cluster</h2>
    <div class="muted" id="snapshot-age">Loading&hellip;</div>
    <table id="nodes" hidden>
      <thead><tr><th>Node</th><th>State</th><th>GPUs used / total</th></tr></thead>
      <tbody></tbody>
    </table>
    <p id="gpus" hidden></p>
    <h2>Jobs</h2>
    <p id="jobs-summary" class="muted"></p>
    <table id="jobs" hidden>
      <thead><tr><th>Job</th><th>State</th><th>Name</th><th>GRES</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
  <section class="wide" aria-labelledby="usage-title">
    <h2 id="usage-title">GPUs allocated, last hour</h2>
    <div class="muted" id="metrics-state">Loading&hellip;</div>
    <svg id="gpu-chart" viewBox="0 0 640 180" role="img" aria-label="GPUs allocated over the last hour" hidden></svg>
    <p id="gpu-now" hidden></p>
    <h2>Cost this month</h2>
    <table id="costs" hidden>
      <thead><tr><th>Account</th><th>GPU-hours</th><th>USD</th></tr></thead>
      <tbody></tbody>
    </table>
    <p id="costs-none" class="muted" hidden>No cost this month (it is counted with the stack&#39;s accounting).</p>
  </section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const MODE_LABELS = {"gpu": "GPU", "cpu-fallback": "CPU fallback"};

function show(id, visible) { $(id).hidden = !visible; }

function notice(kind, text) {
  const box = $("notice");
  box.className = "notice " + kind;
  box.textContent = text;
  box.hidden = !text;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement("td");
    td.textContent = String(cell);
    tr.appendChild(td);
  }
  return tr;
}

async function loadInfo() {
  try {
    const info = await (await fetch("/api/info")).json();
    const command = info.job_command.join(" ");
    $("about").textContent = info.gpu_unavailable_reason
      ? "No GPU here (" + info.gpu_unavailable_reason + "): Run does a CPU fallback job instead of " + command + "."
      : "Run executes " + command + " on this container's GPU.";
    $("about").textContent += " At most " + info.max_concurrent_jobs + " jobs at once, each stopped after "
      + info.job_timeout_s + " s.";
    if (!info.run_allowed) {
      $("run").disabled = true;
      notice("error", "Your address may not run jobs here.");
    }
  } catch (error) {
    $("about").textContent = "The app did not answer: " + error;
  }
}

function showResult(body) {
  const mode = $("mode");
  mode.textContent = MODE_LABELS[body.mode] || body.mode;
  mode.className = "badge " + body.mode;
  $("device").textContent = body.device;
  $("duration").textContent = body.seconds.toFixed(3) + " s";
  $("returncode").textContent = String(body.returncode);
  $("reason").textContent = body.reason || "";
  show("reason", Boolean(body.reason));
  show("reason-label", Boolean(body.reason));
  $("output").textContent = body.output;  // text, never markup
  show("result", true);
}

async function run() {
  $("run").disabled = true;
  show("running", true);
  notice("", "");
  try {
    const response = await fetch("/api/run", {method: "POST", body: ""});
    let body = {};
    try { body = await response.json(); } catch (error) { body = {error: "HTTP " + response.status}; }
    if (response.status === 503) {
      const text = body.error || "busy: all job slots are taken";
      notice("busy", text.charAt(0).toUpperCase() + text.slice(1) + ". Try again in a moment.");
    } else if (body.output !== undefined) {
      showResult(body);
      if (response.status !== 200) notice("error", "The job failed (exit code " + body.returncode + ").");
    } else {
      notice("error", "Error " + response.status + ": " + (body.error || "unexpected answer"));
    }
  } catch (error) {
    notice("error", "The app could not be reached: " + error);
  } finally {
    show("running", false);
    $("run").disabled = false;
  }
}

async function loadCluster() {
  let snap;
  try {
    snap = await (await fetch("/api/cluster")).json();
  } catch (error) {
    $("snapshot-age").textContent = "Cluster snapshot not reachable: " + error;
    return;
  }
  if (!snap.available) {
    $("snapshot-age").textContent = snap.error;
    show("nodes", false);
    return;
  }
  $("snapshot-age").textContent = "Snapshot of cluster " + snap.cluster + ", " + snap.age_s + " s old"
    + (snap.stale ? " (STALE: the controller side stopped writing it)" : "")
    + (snap.error ? "; Slurm said: " + snap.error : "");
  const nodes = $("nodes").tBodies[0];
  nodes.replaceChildren(...snap.nodes.map((n) => row([n.name, n.state, n.gpus_used + " / " + n.gpus_total])));
  show("nodes", true);
  const used = snap.nodes.reduce((sum, n) => sum + n.gpus_used, 0);
  const total = snap.nodes.reduce((sum, n) => sum + n.gpus_total, 0);
  $("gpus").textContent = "GPUs: " + (total - used) + " free, " + used + " used, " + total + " in all";
  show("gpus", true);
  $("jobs-summary").textContent = snap.jobs.running + " running, " + snap.jobs.pending + " queued";
  const jobs = $("jobs").tBodies[0];
  jobs.replaceChildren(...snap.jobs.list.map((j) => row([j.id, j.state, j.name, j.gres])));
  show("jobs", snap.jobs.list.length > 0);
}

const SVG = $("gpu-chart").namespaceURI;  // the inline <svg>'s: SVG's namespace
const CHART = {width: 640, height: 180, left: 40, right: 10, top: 10, bottom: 24};

function svg(name, attributes, text) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  if (text !== undefined) element.textContent = text;
  return element;
}

// A step line through [time, value] points: a value holds until the next sample.
function steps(points, x, y) {
  return points.map(([t, v], i) => (i ? x(t) + "," + y(points[i - 1][1]) + " " : "") + x(t) + "," + y(v)).join(" ");
}

function drawChart(m) {
  const chart = $("gpu-chart");
  const w = CHART.width - CHART.left - CHART.right, h = CHART.height - CHART.top - CHART.bottom;
  const top = Math.max(1, ...m.total.map((p) => p[1]), ...m.allocated.map((p) => p[1]));
  const x = (t) => (CHART.left + (t - m.start) / (m.end - m.start) * w).toFixed(1);
  const y = (v) => (CHART.top + h - v / top * h).toFixed(1);
  const parts = [];
  for (const v of [0, top / 2, top]) {
    parts.push(svg("line", {class: "grid", x1: CHART.left, x2: CHART.left + w, y1: y(v), y2: y(v)}));
    parts.push(svg("text", {x: CHART.left - 6, y: Number(y(v)) + 4, "text-anchor": "end"}, String(+v.toFixed(1))));
  }
  parts.push(svg("line", {class: "axis", x1: CHART.left, x2: CHART.left + w, y1: y(0), y2: y(0)}));
  for (const [minutes, anchor] of [[60, "start"], [30, "middle"], [0, "end"]]) {
    const label = minutes ? "-" + minutes + " min" : "now";
    parts.push(svg("text", {x: x(m.end - minutes * 60), y: CHART.height - 6, "text-anchor": anchor}, label));
  }
  if (m.total.length) parts.push(svg("polyline", {class: "total", points: steps(m.total, x, y)}));
  if (m.allocated.length) {
    const line = steps(m.allocated, x, y);
    const first = m.allocated[0][0], last = m.allocated[m.allocated.length - 1][0];
    const area = x(first) + "," + y(0) + " " + line + " " + x(last) + "," + y(0);
    parts.push(svg("polygon", {class: "allocated", points: area}));
  }
  chart.replaceChildren(...parts);
  chart.removeAttribute("hidden");  // an SVG element has no `hidden` property, only the attribute
}

async function loadMetrics() {
  let m;
  try {
    m = await (await fetch("/api/metrics")).json();
  } catch (error) {
    $("metrics-state").textContent = "Metrics not reachable: " + error;
    return;
  }
  if (!m.available) {
    $("metrics-state").textContent = m.error;
    return;
  }
  $("metrics-state").textContent = "From the cluster's Prometheus; dashed: GPUs in all.";
  drawChart(m);
  const now = m.allocated.length ? m.allocated[m.allocated.length - 1][1] : 0;
  const total = m.total.length ? m.total[m.total.length - 1][1] : 0;
  $("gpu-now").textContent = "Now: " + now + " of " + total + " GPUs allocated";
  show("gpu-now", true);
  const costs = $("costs").tBodies[0];
  costs.replaceChildren(...m.accounts.map((a) => row([a.account, a.gpu_hours.toFixed(4), "$" + a.usd.toFixed(4)])));
  show("costs", m.accounts.length > 0);
  show("costs-none", m.accounts.length === 0);
}

$("run").addEventListener("click", run);
loadInfo();
loadCluster();
loadMetrics();
setInterval(loadCluster, 3000);
setInterval(loadMetrics, 15000);
</script>
</body>
</html>
"""
