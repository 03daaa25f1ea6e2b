// The `evolve ui` page: plots drawn by plotly.js (served from the plotly package), everything
// else built with DOM calls. Archive text only ever reaches the page through textContent
// (h() below) or escaped into plotly hover labels (esc()), never through innerHTML.
"use strict";
const $ = (s) => document.querySelector(s);
function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  setAttrs(e, attrs); addKids(e, kids); return e;
}
function setAttrs(e, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
}
function addKids(e, kids) {
  for (const c of kids.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}
const fin = (v) => typeof v === "number" && isFinite(v);
function pct(v) {
  if (!fin(v)) return "—";
  return v < 10 ? (100 * v).toPrecision(3) + "%" : v.toPrecision(3) + "×";
}
// a held-out regime's error: in points where it is a difference of two fractions (the overload
// failures; the server says which: evaluator.objectives.Objective.points), else as pct
function regime(v, points) {
  return points && fin(v) ? (100 * v).toFixed(1) + " pts" : pct(v);
}
function rate(v) {  // a fraction in [0, 1], e.g. a cache hit rate
  return fin(v) ? (100 * v).toFixed(1) + "%" : "—";
}
function num(v, d) {
  if (!fin(v)) return "—";
  if (Number.isInteger(v) && Math.abs(v) < 1e6) return String(v);
  return v.toPrecision(d || 4);
}
async function api(path) {
  const r = await fetch(path, {headers: {"Accept": "application/json"}});
  let j = null;
  try { j = await r.json(); } catch (e) { throw new Error("HTTP " + r.status); }
  if (!r.ok) throw new Error((j && j.error) || ("HTTP " + r.status));
  return j;
}

const S = {runs: [], run: "", maxC: null, range: null, points: [], sel: null, baselines: new Map(),
           base: null, token: 0, ptoken: 0, history: null, recommended: null, regimes: [], rankedLabel: "",
           sort: {key: "complexity", dir: 1}};

function readHash() {
  const out = {};
  for (const kv of location.hash.replace(/^#/, "").split("&")) {
    const i = kv.indexOf("=");
    if (i > 0) out[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1));
  }
  return out;
}
function writeHash() {
  const parts = ["run=" + encodeURIComponent(S.run)];
  if (S.logTouched) parts.push("log=" + ($("#logy").checked ? 1 : 0));
  if (S.sel !== null) parts.push("p=" + S.sel);
  history.replaceState(null, "", "#" + parts.join("&"));
}

async function init() {
  const hs = readHash();
  if (hs.log === "1" || hs.log === "0") { $("#logy").checked = hs.log === "1"; S.logTouched = true; }
  let r;
  try { r = await api("/api/runs"); } catch (e) { $("#status").textContent = "error: " + e.message; return; }
  S.runs = r.runs;
  $("#arch").textContent = r.archive; $("#arch").title = r.archive;
  const sel = $("#run");
  sel.append(h("option", {value: ""}, "all runs"));
  for (const run of r.runs) {
    const spend = run.llm_spend ? ` · LLM $${(run.llm_spend.cost_usd || 0).toFixed(4)}, ${run.llm_spend.tokens} tokens` : "";
    sel.append(h("option", {value: run.id}, `${run.id} · ${run.status} · ${run.n_evaluated} evaluated${spend}`));
  }
  const want = hs.run !== undefined && (hs.run === "" || r.runs.some((x) => x.id === hs.run)) ? hs.run : (r.default || "");
  sel.value = want; S.run = want;
  sel.addEventListener("change", async () => {
    S.run = sel.value; S.maxC = null; S.range = null; S.sel = null; writeHash();
    await loadPoints(true);
    if (S.recommended !== null) select(S.recommended);  // a new run opens on its recommended program
  });
  const cxr = $("#cxr"), cx = $("#cx");
  let timer = null;
  const apply = (v) => { S.maxC = v === "" ? null : Number(v); loadPoints(false); };
  cxr.addEventListener("input", () => { cx.value = cxr.value; clearTimeout(timer); timer = setTimeout(() => apply(cxr.value), 120); });
  cx.addEventListener("change", () => { cxr.value = cx.value; clearTimeout(timer); apply(cx.value); });
  cx.addEventListener("keydown", (ev) => { if (ev.key === "Enter") cx.dispatchEvent(new Event("change")); });
  $("#logy").addEventListener("change", () => { S.logTouched = true; drawPlot(); writeHash(); });
  window.addEventListener("resize", () => { clearTimeout(S.rt); S.rt = setTimeout(drawAll, 100); });
  await loadPoints(true);
  // the page opens on the program to take (the run's recommended one) unless the link names another
  if (hs.p && /^[0-9]+$/.test(hs.p)) select(Number(hs.p));
  else if (S.recommended !== null) select(S.recommended);
}

async function loadPoints(newRun) {
  const my = ++S.ptoken;
  let url = "/api/points?run=" + encodeURIComponent(S.run);
  if (S.maxC !== null && !newRun) url += "&max_complexity=" + encodeURIComponent(S.maxC);
  $("#status").textContent = "loading…";
  let r;
  try { r = await api(url); } catch (e) { $("#status").textContent = "error: " + e.message; return; }
  if (my !== S.ptoken) return;
  S.points = r.points;
  S.recommended = r.recommended === undefined ? null : r.recommended;
  S.regimes = r.regimes || []; S.rankedLabel = r.ranked_label || "";
  if (r.history) S.history = r.history;
  if (newRun || !S.range) {
    S.range = r.complexity_range;
    if (!S.logTouched) {  // a log axis by default when the errors span more than 20x
      // over the errors the plot shows (a runaway program above 3x the frontier's worst is left out)
      const fmax = Math.max(0, ...S.points.filter((p) => p.frontier).map((p) => p.e2e_mean).filter(fin));
      const es = S.points.map((p) => p.e2e_mean).filter((v) => v > 0 && (!fmax || v <= 3 * fmax));
      $("#logy").checked = es.length > 1 && Math.max(...es) / Math.min(...es) > 20;
    }
    const lo = S.range ? Math.floor(S.range[0]) : 0, hi = S.range ? Math.ceil(S.range[1]) : 0;
    for (const el of [$("#cxr"), $("#cx")]) { el.min = lo; el.max = hi; el.value = hi; }
    S.maxC = null;
  }
  const nf = S.points.filter((p) => p.frontier).length;
  $("#status").textContent = `${S.points.length} programs shown · ${nf} on the frontier` +
    (r.n_unplottable ? ` · ${r.n_unplottable} invalid hidden` : "");
  S.base = null;
  drawAll();
  ensureBaselines(S.run).then((b) => { if (S.run === b.run) { S.base = b; drawPlot(); } }).catch(() => {});
}

function ensureBaselines(run) {
  if (!S.baselines.has(run)) {
    const p = api("/api/baselines?run=" + encodeURIComponent(run));
    p.catch(() => S.baselines.delete(run));
    S.baselines.set(run, p);
  }
  return S.baselines.get(run);
}


function drawAll() { drawPlot(); drawTable(); drawHistory(); }

// ------------------------------------------------------------ plots (plotly.js)
const BCOL = ["#16a34a", "#ea8c00", "#7c3aed", "#0891b2", "#c026d3", "#65a30d"];
const PT = "#98a2b3", ACC = "#d92d20";
const CONFIG = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["sendDataToCloud", "select2d", "lasso2d"]};
// plotly.js renders a little HTML in hover labels: archive text goes in as entities
const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const FONT = {family: 'system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif', size: 12, color: "#344054"};

function baselinePoints() {
  if (!S.base) return [];
  const out = [];
  let j = 0;
  for (const [name, b] of Object.entries(S.base.baselines)) {
    const col = BCOL[j++ % BCOL.length];
    const c = b.objectives.complexity, e = b.objectives.e2e_mean;
    if (b.valid && fin(e)) out.push({name, c, e, col});  // a reference line: its complexity does not matter
  }
  return out;
}

function pointTip(p) {
  return `#${p.id}${p.frontier ? "  (frontier)" : ""}  ${esc(p.operator || "")}<br>complexity ${num(p.complexity)}<br>` +
    `E2E ${pct(p.e2e_mean)}  worst ${pct(p.e2e_worst)}<br>TTFT ${pct(p.ttft_mean)}  ITL ${pct(p.itl_mean)}`;
}

// the complexity-E2E staircase through the frontier members
function staircase(fr) {
  const stair = [];
  let best = Infinity;
  for (const p of fr) if (p.e2e_mean < best) { stair.push(p); best = p.e2e_mean; }
  return stair;
}

function recommendedTrace() {  // the program a run hands over, as a star
  const p = S.points.find((q) => q.recommended);
  if (!p) return [];
  return [{uid: "recommended", type: "scatter", mode: "markers", name: `★ recommended #${p.id}`, x: [p.complexity],
           y: [p.e2e_mean], customdata: [p.id], hovertext: [pointTip(p) + "<br>★ recommended"], hoverinfo: "text",
           marker: {symbol: "star", size: 17, color: "#f5b301", line: {color: "#7a4d00", width: 1}}}];
}

function selectedXY() {
  const p = S.points.find((q) => q.id === S.sel);
  return p ? {x: [p.complexity], y: [p.e2e_mean], customdata: [p.id], hovertext: [pointTip(p)]}
    : {x: [], y: [], customdata: [], hovertext: []};
}

// Trace uids name the DOM groups plotly draws ("trace<uid>"): evaluated, frontier, selected.
function drawPlot() {
  const gd = $("#plot");
  const pts = S.points, bp = baselinePoints();
  const logy = $("#logy").checked;
  const rest = pts.filter((p) => !p.frontier);
  const fr = pts.filter((p) => p.frontier).sort((a, b) => a.complexity - b.complexity || a.e2e_mean - b.e2e_mean);
  const stair = staircase(fr);
  const marker = (list) => ({x: list.map((p) => p.complexity), y: list.map((p) => p.e2e_mean),
                             customdata: list.map((p) => p.id), hovertext: list.map(pointTip), hoverinfo: "text"});
  const sel = selectedXY();
  const data = [
    {uid: "stair", type: "scatter", mode: "lines", name: "complexity–E2E front", x: stair.map((p) => p.complexity),
     y: stair.map((p) => p.e2e_mean), line: {shape: "hv", color: ACC, width: 1.6, dash: "dash"}, hoverinfo: "skip"},
    {uid: "evaluated", type: "scatter", mode: "markers", name: "evaluated", ...marker(rest),
     marker: {color: PT, size: 8, opacity: 0.6, line: {width: 0}}},
    {uid: "frontier", type: "scatter", mode: fr.length <= 14 ? "markers+text" : "markers", name: "frontier (all objectives)",
     ...marker(fr), text: fr.map((p) => "#" + p.id), textposition: "top right", textfont: {size: 10.5, color: "#b42318"},
     marker: {color: ACC, size: 11, line: {color: "#fff", width: 1.5}}},
    ...recommendedTrace(),
    {uid: "selected", type: "scatter", mode: "markers", name: "selected", showlegend: false, ...sel, hoverinfo: "text",
     marker: {symbol: "circle-open", size: 19, color: "#101828", line: {width: 2.5}}},
  ];
  const layout = {
    font: FONT, margin: {l: 64, r: 16, t: 8, b: 46}, hovermode: "closest", dragmode: "zoom", uirevision: S.run,
    legend: {orientation: "h", x: 0, y: 1.02, yanchor: "bottom", font: {size: 11.5}},
    xaxis: {title: {text: "complexity (operations + conditionals + constants)"}, zeroline: false, gridcolor: "#eef0f3",
            rangemode: "tozero"},
    yaxis: {title: {text: "mean E2E error, in-sample" + (logy ? " (log)" : "")}, type: logy ? "log" : "linear", tickformat: ".3~%",
            gridcolor: "#eef0f3", zeroline: false, rangemode: logy ? "normal" : "tozero"},
    annotations: pts.length ? [] : [{text: "no valid evaluated programs" + (S.maxC !== null ? " at this complexity" : ""),
                                     xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false,
                                     font: {size: 14, color: PT}}],
    shapes: [],
    plot_bgcolor: "#fff", paper_bgcolor: "#fff",
  };
  // the y axis fits the candidates: a runaway program (more than 3x the frontier's worst) or a
  // baseline never flattens the front; baselines are labelled reference lines, named at the
  // top edge when they lie above it
  const ys = pts.map((p) => p.e2e_mean).filter((v) => fin(v) && (!logy || v > 0));
  const fys = fr.map((p) => p.e2e_mean).filter(fin);
  if (ys.length) {
    const top = fys.length ? Math.min(Math.max(...ys), 3 * Math.max(...fys)) : Math.max(...ys);
    const inside = ys.filter((v) => v <= top);
    const lines = bp.map((b) => b.e).filter((v) => v <= top && (!logy || v > 0));  // baselines the range shows
    const lo = Math.min(...inside, ...lines), hi = Math.max(...inside, ...lines);
    if (logy) {
      const a = Math.log10(lo), b = Math.log10(hi), pad = Math.max(0.06 * (b - a), 0.06);
      layout.yaxis.range = [a - pad, b + pad];
    } else layout.yaxis.range = [0, hi + Math.max(0.06 * (hi - lo), 0.06 * hi, 1e-9)];
    layout.yaxis.autorange = false;
    const nAbove = ys.length - inside.length;
    const above = [];
    for (const b of bp) {
      if (b.e > top) { above.push(`${b.name} ${pct(b.e)}`); continue; }
      layout.shapes.push({type: "line", xref: "paper", x0: 0, x1: 1, y0: b.e, y1: b.e, line: {color: b.col, width: 1.5, dash: "dot"}});
      layout.annotations.push({text: `baseline ${esc(b.name)} ${pct(b.e)}`, xref: "paper", x: 1, xanchor: "right", y: b.e,
                               yanchor: "bottom", showarrow: false, font: {size: 11, color: b.col}, bgcolor: "rgba(255,255,255,0.8)"});
    }
    const notes = [];
    if (above.length) notes.push("↑ above: baseline " + esc(above.join(", ")));
    if (nAbove) notes.push(`${nAbove} evaluated above the plot (up to ${pct(Math.max(...ys))})`);
    // at the bottom right: errors start at 0, the top edge is where a baseline's label may sit
    if (notes.length) layout.annotations.push({text: notes.join(" · "), xref: "paper", yref: "paper", x: 1, y: 0,
                                               xanchor: "right", yanchor: "bottom", showarrow: false,
                                               font: {size: 11, color: "#667085"}, bgcolor: "rgba(255,255,255,0.85)"});
  }
  gd.dataset.baselines = String(bp.length);
  // a new log setting must reset the y range; uirevision keeps the user's zoom otherwise
  layout.yaxis.uirevision = S.run + (logy ? ":log" : ":lin") + ":" + S.maxC;
  Plotly.react(gd, data, layout, CONFIG);
  if (!gd.dataset.bound) {
    gd.dataset.bound = "1";
    gd.on("plotly_click", (ev) => {
      const p = ev && ev.points && ev.points[0];
      if (p && ["evaluated", "frontier", "selected", "recommended"].includes(p.data.uid) && p.customdata !== undefined) select(p.customdata);
    });
  }
}

function drawHistory() {
  const gd = $("#history");
  const runs = Object.entries((S.history && S.history.runs) || {});
  const lab = (S.history && S.history.label) || "error";
  $("#hcount").textContent = runs.length ? `per run, over its full evaluations; best = ${lab} (what the search ranks on); ` +
    `hypervolume of (complexity, that error) w.r.t. (${num(S.history.ref[0])}, ${pct(S.history.ref[1])}), as in the run summary`
    : "no full evaluations yet";
  const data = [];
  runs.forEach(([rid, s], j) => {
    const col = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"][j % 6];
    const best = s.filter((t) => fin(t[1]));
    data.push({type: "scatter", mode: "lines", name: esc(rid), legendgroup: rid, x: best.map((t) => t[0]),
               y: best.map((t) => t[1]), line: {shape: "hv", color: col, width: 2}, xaxis: "x", yaxis: "y",
               hovertemplate: "after %{x} evaluations: best %{y:.3~%}<extra>" + esc(rid) + "</extra>"});
    data.push({type: "scatter", mode: "lines", name: esc(rid), legendgroup: rid, showlegend: false,
               x: s.map((t) => t[0]), y: s.map((t) => t[2]), line: {shape: "hv", color: col, width: 2},
               xaxis: "x2", yaxis: "y2", hovertemplate: "after %{x} evaluations: hypervolume %{y:.4g}<extra>" + esc(rid) + "</extra>"});
  });
  const bests = runs.flatMap(([, s]) => s.map((t) => t[1]).filter((v) => v > 0));
  const logb = bests.length > 1 && Math.max(...bests) / Math.min(...bests) > 20;
  const layout = {
    font: FONT, margin: {l: 64, r: 16, t: 28, b: 40}, grid: {rows: 1, columns: 2, pattern: "independent"},
    showlegend: runs.length > 1, legend: {orientation: "h", x: 0, y: -0.2, yanchor: "top"},
    xaxis: {title: {text: "evaluation index"}, gridcolor: "#eef0f3"}, xaxis2: {title: {text: "evaluation index"}, gridcolor: "#eef0f3"},
    yaxis: {type: logb ? "log" : "linear", tickformat: ".3~%", gridcolor: "#eef0f3"},
    yaxis2: {rangemode: "tozero", gridcolor: "#eef0f3"},
    annotations: [{text: esc(lab) + ": best so far", xref: "x domain", yref: "paper", x: 0.5, y: 1.06, showarrow: false},
                  {text: "hypervolume so far", xref: "x2 domain", yref: "paper", x: 0.5, y: 1.06, showarrow: false}],
    plot_bgcolor: "#fff", paper_bgcolor: "#fff",
  };
  Plotly.react(gd, data, layout, CONFIG);
}

// ------------------------------------------------------------ frontier table
// columns of the frontier table: [key, header, formatter, left-aligned, tooltip]; click a header to sort
function tableColumns() {
  return [["id", "id", (p) => (p.recommended ? "★ #" : "#") + p.id, true, "★: the recommended program"],
          ["twins", "twins", (p) => (p.duplicates.length ? "+" + p.duplicates.length : ""), false,
           "behavioural duplicates collapsed into this row: every stored objective but complexity and every per-stage prediction within 0.1% relative"],
          ["complexity", "cplx", (p) => num(p.complexity), false, "operations + conditionals + constants"],
          ...S.regimes.map(([k, lab, points]) => [k, lab, (p) => regime(p[k], points), false, "held-out: " + lab]),
          ...(S.regimes.length ? [["ranked_error", "worst regime", (p) => regime(p.ranked_error, p.ranked_points), false,
                                  "the worst held-out regime: what the search ranks on"]] : []),
          ["e2e_mean", "E2E", (p) => pct(p.e2e_mean), false, "in-sample mean E2E error"],
          ["e2e_worst", "E2E worst", (p) => pct(p.e2e_worst), false, "in-sample worst stage E2E error"],
          ["ttft_mean", "TTFT", (p) => pct(p.ttft_mean), false, "in-sample"],
          ["itl_mean", "ITL", (p) => pct(p.itl_mean), false, "in-sample"],
          ["step_mape", "step MAPE", (p) => pct(p.step_mape), false, null],
          ["operator", "operator", (p) => p.operator || "", true, null],
          ["generation", "gen", (p) => num(p.generation), false, null]];
}

function sortValue(p, key) {
  if (key === "twins") return p.duplicates.length;
  if (key === "id") return p.id;
  return p[key];
}

function sortRows(rows) {  // missing values ("—") last whatever the direction
  const {key, dir} = S.sort;
  return rows.slice().sort((a, b) => {
    const x = sortValue(a, key), y = sortValue(b, key);
    const mx = x === null || x === undefined || (typeof x === "number" && !isFinite(x));
    const my = y === null || y === undefined || (typeof y === "number" && !isFinite(y));
    if (mx || my) return mx === my ? a.id - b.id : (mx ? 1 : -1);
    const c = typeof x === "string" ? x.localeCompare(y) : x - y;
    return c ? dir * c : a.complexity - b.complexity || a.id - b.id;
  });
}

function drawTable() {
  const t = $("#ftable");
  while (t.firstChild) t.removeChild(t.firstChild);
  const all = S.points.filter((p) => p.frontier);
  const fr = sortRows(all.filter((p) => p.duplicate_of === null || p.duplicate_of === undefined));
  const nd = all.length - fr.length;
  const cols = tableColumns();
  const head = cols.find((c) => c[0] === S.sort.key);
  $("#fcount").textContent = `${fr.length} rows` + (nd ? ` (${nd} behavioural duplicates collapsed: twins +N)` : "") +
    `, sorted by ${head ? head[1] : S.sort.key} ${S.sort.dir > 0 ? "↑" : "↓"}; click a header to sort`;
  t.append(h("thead", null, h("tr", null, cols.map(([k, lab, , left, tip]) =>
    h("th", {class: (left ? "l " : "") + "sortable" + (S.sort.key === k ? " sorted" : ""), title: tip, "data-key": k,
             onclick: () => { S.sort = {key: k, dir: S.sort.key === k ? -S.sort.dir : 1}; drawTable(); }},
      lab + (S.sort.key === k ? (S.sort.dir > 0 ? " ▲" : " ▼") : ""))))));
  const tb = h("tbody");
  for (const p of fr) {
    tb.append(h("tr", {class: (p.id === S.sel ? "sel " : "") + (p.recommended ? "rec" : ""), "data-id": p.id,
                       onclick: () => select(p.id)},
      cols.map(([k, , f, left]) => h("td", {class: left ? "l" : null,
                                            title: k === "twins" && p.duplicates.length ? p.duplicates.map((i) => "#" + i).join(", ") : null}, f(p)))));
  }
  t.append(tb);
}

// ------------------------------------------------------------ side panel

// ------------------------------------------------------------ side panel
function markSelected() {
  const gd = $("#plot");
  if (gd.data) {
    const i = gd.data.findIndex((t) => t.uid === "selected");
    const s = selectedXY();
    if (i >= 0) Plotly.restyle(gd, {x: [s.x], y: [s.y], customdata: [s.customdata], hovertext: [s.hovertext]}, [i]);
  }
  for (const r of document.querySelectorAll("#ftable tbody tr")) r.classList.toggle("sel", Number(r.dataset.id) === S.sel);
}

async function select(id) {
  S.sel = id; writeHash(); markSelected();
  const my = ++S.token;
  const panel = $("#panel");
  panel.replaceChildren(h("div", {class: "placeholder"}, `loading program #${id}…`));
  let rec;
  try { rec = await api("/api/program/" + id); }
  catch (e) { if (my === S.token) panel.replaceChildren(h("p", {class: "err"}, "error: " + e.message)); return; }
  if (my !== S.token) return;
  renderProgram(rec, my);
}

function closePanel() {
  S.sel = null; S.token++; writeHash(); markSelected();
  $("#panel").replaceChildren(h("div", {class: "placeholder"}, "Click a point (or a frontier row) to inspect a program."));
}

function renderProgram(rec, my) {
  const panel = $("#panel");
  const ev = rec.evaluation || {};
  const obj = ev.objectives || rec.objectives || {};
  const onFront = S.points.some((p) => p.id === rec.id && p.frontier);
  const head = h("div", {class: "ph"}, h("h2", {id: "pid"}, `Program #${rec.id}`),
    rec.recommended ? h("span", {class: "tag rec", id: "rectag", title: "the program the run hands over"}, "★ recommended") : null,
    onFront ? h("span", {class: "tag front"}, "frontier") : null,
    rec.go_cap === null ? h("span", {class: "tag ok"}, "fits Go cap") : h("span", {class: "tag no"}, "over Go cap"),
    h("button", {class: "x", title: "close", onclick: closePanel}, "×"));
  const parents = (rec.parent_ids || []).map((p) => h("span", {class: "chip", onclick: () => select(p)}, "#" + p));
  const meta = h("div", {class: "meta"},
    `run ${rec.run_id} · generation ${rec.generation} · operator ${rec.operator}` +
    (rec.llm_model ? ` · LLM ${rec.llm_model}` : "") + " · parents ", parents.length ? parents : "none",
    h("br"), rec.complexity !== null && rec.complexity !== undefined ?
      `complexity ${rec.complexity} = ${rec.n_ops} operations + ${rec.n_cond} conditionals + ${rec.n_consts} constants` :
      "complexity unknown",
    ` · Go cap: ${rec.go_cap === null ? "fits" : rec.go_cap}`,
    ev.stage ? ` · ${ev.stage} evaluation` : "", ev.valid === false ? h("span", {class: "err"}, ` · INVALID: ${ev.error}`) : null);
  const kpiBox = h("div", {class: "kpis"});
  const source = h("pre", {class: "src", id: "src"}, rec.source);
  const consts = constTable(rec, ev);
  const errBox = h("div", {id: "errs"});
  const errPlot = (ev.rows || []).length ? h("div", {id: "errplot", class: "plot"}) : null;
  const pmPlot = (ev.rows || []).length ? h("div", {id: "pmplot", class: "plot"}) : null;
  const goBox = h("div", {id: "go"}, h("p", {class: "muted small"}, "generating Go…"));
  const why = rec.recommended ? h("p", {class: "recnote", id: "recnote"}, `★ recommended for run ${rec.run_id}: ` +
    "closest to the run's best error in every held-out regime (its largest gap is least" +
    (rec.fit_starts_text ? ", at its worst fit start" : "") +
    ") among programs whose every constant the data pins down") : null;
  const starts = rec.fit_starts_text ? [h("p", {class: "muted small", id: "fitstarts"}, rec.fit_starts_text)] : [];
  // replaceChildren would write a null as the text "null": absent parts are left out
  panel.replaceChildren(head, meta, ...(why ? [why] : []), ...regimesBox(rec), ...starts, ...coverageBox(rec),
    h("h3", null, "In-sample errors (time split; below: the best baseline)"), kpiBox, h("h3", null, "Source"), source,
    ...(consts ? [h("h3", null, "Fitted constants per model"), consts] : []),
    ...(rec.holdout_summary ? [h("h3", null, "Held-out errors (constants fitted without the held-out part)"),
                               holdoutTable(rec)] : []),
    ...(pmPlot ? [h("h3", null, "Predicted vs measured per experiment and stage (held-out part; dashed: equal)"), pmPlot] : []),
    h("h3", null, "Errors per experiment and load stage (held-out part)"), errBox, errPlot,
    h("h3", null, "Go (BLIS LatencyModel)"), goBox);
  const fill = (b) => {
    if (my !== S.token) return;
    const bname = b && b.best, bev = bname ? b.baselines[bname] : null;
    kpiBox.replaceChildren(...[["e2e_mean", "E2E mean"], ["e2e_worst", "E2E worst"], ["ttft_mean", "TTFT mean"],
      ["itl_mean", "ITL mean"], ["step_mape", "step MAPE"]].map(([k, lab]) => h("div", {class: "kpi"},
        h("div", {class: "k"}, lab), h("div", {class: "v"}, pct(obj[k])),
        h("div", {class: "b"}, bev ? `${bname}: ${pct(bev.objectives[k])}` : (b ? "" : "baseline…")))));
    errBox.replaceChildren(...[errorTable(ev.rows || [], bname, bev, b === null)].flat());
    if (errPlot) drawStageErrors(errPlot, rec, ev.rows, bname, bev);
  };
  fill(null);
  if (pmPlot) drawPredMeas(pmPlot, ev.rows);
  ensureBaselines(rec.run_id && !rec.baseline_run && S.runs.some((r) => r.id === rec.run_id) ? rec.run_id : S.run)
    .then(fill).catch((e) => { if (my === S.token) errBox.prepend(h("p", {class: "err small"}, "baselines: " + e.message)); });
  api(`/api/program/${rec.id}/go`).then((g) => {
    if (my !== S.token) return;
    if (g.ok) goBox.replaceChildren(h("p", {class: "muted small"}, `models: ${g.models.join(", ")} · what \`evolve emit-go ${rec.id}\` writes` +
                                      (g.note ? ` · ${g.note}` : "")),
                                    h("pre", {class: "go", id: "gocode"}, g.code));
    else goBox.replaceChildren(h("div", {class: "refuse", id: "gorefuse"}, g.error));
  }).catch((e) => { if (my === S.token) goBox.replaceChildren(h("div", {class: "refuse"}, "error: " + e.message)); });
}

// held-out error per regime (the worst in red: what the run ranks the program on)
function regimesBox(rec) {
  const regs = rec.regimes || [];
  if (!regs.length) return [h("p", {class: "muted small", id: "regimes"}, "no held-out errors (a run without held-out splits)")];
  return [h("h3", null, "Held-out error per regime (constants fitted without the held-out part)"),
          h("div", {class: "kpis regimes", id: "regimes"}, regs.map((r) => h("div", {class: "kpi" + (r.worst ? " worst" : ""),
            title: r.worst ? "the worst regime: what the run ranks this program on" : null},
            h("div", {class: "k"}, r.label + (r.worst ? " · worst" : "")), h("div", {class: "v"}, regime(r.value, r.points)))))];
}

// where the program holds: the coverage statement `evolve show` prints
function coverageBox(rec) {
  if (rec.coverage_error) return [h("p", {class: "err small", id: "coverage"}, "coverage: " + rec.coverage_error)];
  if (!rec.coverage) return [];
  const items = rec.coverage.filter(([head]) => !(head.startsWith("Held-out error") && (rec.regimes || []).length));
  return [h("h3", null, "Coverage: where it holds"),
          h("ul", {class: "coverage", id: "coverage"}, items.map(([head, text]) => h("li", null, h("span", {class: "ch"}, head + ": "), text)))];
}

function holdoutTable(rec) {  // rec.holdout_summary / holdout_splits: evolve.views.holdout_table
  const hd = h("tr", null, ["split", "", "E2E", "worst E2E", "TTFT", "ITL", "not scored"].map((c, i) =>
    h("th", i < 2 || i === 6 ? {class: "l"} : null, c)));
  const rows = rec.holdout_summary.map((r) => h("tr", null, h("td", {class: "l"}, r.kind), h("td", {class: "l muted"}, r.title),
    ["e2e", "e2e_worst", "ttft", "itl"].map((k) => h("td", null, pct(r[k]))),
    h("td", {class: "l err"}, Object.entries(r.errors || {}).map(([k, v]) => `${k}: ${v}`).join("; "))));
  const splits = Object.entries(rec.holdout_splits || {}).map(([k, v]) => h("tr", null, h("td", {class: "l"}, k),
    h("td", null, pct(v))));
  return h("div", {class: "tw", id: "holdout"},
    h("table", null, h("thead", null, hd), h("tbody", null, rows)),
    h("table", null, h("thead", null, h("tr", null, h("th", {class: "l"}, "held out"), h("th", null, "mean E2E"))),
      h("tbody", null, splits)));
}

function constTable(rec, ev) {
  const consts = ev.constants || {};
  const models = Object.keys(consts).sort();
  if (!models.length) return null;
  const width = Math.max(...models.map((m) => consts[m].length));
  const names = rec.const_names || [];
  const hd = h("tr", null, h("th", {class: "l"}, "model"),
    Array.from({length: width}, (_, j) => h("th", null, names[j] || `c${j}`)));
  const rows = models.map((m) => h("tr", null, h("td", {class: "l"}, m),
    consts[m].map((v) => h("td", null, fin(v) ? Number(v).toPrecision(5) : "—"))));
  return h("div", {class: "tw"}, h("table", null, h("thead", null, hd), h("tbody", null, rows)));
}

function errorTable(rows, bname, bev, loading) {
  if (!rows.length) return h("p", {class: "muted"}, "no per-experiment rows (invalid or unevaluated program)");
  const key = (r) => `${r.experiment}|${r.stage}`;
  const bmap = new Map(((bev && bev.rows) || []).map((r) => [key(r), r]));
  const hd1 = h("tr", null, h("th", {class: "l", rowspan: 2}, "experiment"), h("th", {rowspan: 2}, "stage"),
    h("th", {rowspan: 2}, "rate"), ["E2E", "TTFT", "ITL"].map((m) => h("th", {colspan: 2, style: "text-align:center"}, m)),
    h("th", {colspan: 4, style: "text-align:center", title: "the simulated prefix cache of the same requests"}, "prefix cache"),
    h("th", {colspan: 3, style: "text-align:center", title: "requests that failed: measured, and aborted by the simulated client timeout"}, "failures"));
  const hd2 = h("tr", null, ["E2E", "TTFT", "ITL"].map(() => [h("th", null, "this"), h("th", null, "base")]),
    h("th", {title: "prompt tokens served from the cache"}, "hit rate"),
    h("th", {title: "what an always-hitting cache would serve"}, "always-hit"),
    h("th", {title: "cached blocks evicted"}, "evictions"), h("th", {title: "times these requests were preempted"}, "preemptions"),
    h("th", {title: "measured share of the requests that failed"}, "measured"),
    h("th", {title: "share the simulated client timeout aborted"}, "simulated"),
    h("th", {title: "|simulated - measured| in percentage points"}, "error"));
  const body = rows.map((r) => {
    const b = bmap.get(key(r));
    const cells = [];
    for (const m of ["e2e", "ttft", "itl"]) {
      const v = r[m + "_err"], bv = b ? b[m + "_err"] : null;
      let cls = null;
      if (fin(v) && fin(bv)) cls = v < bv * 0.98 ? "good" : (v > bv * 1.02 ? "bad" : null);
      cells.push(h("td", {class: cls}, pct(v)), h("td", {class: "b"}, b ? pct(bv) : "—"));
    }
    const label = r.model && r.workload ? `${r.model} · ${r.workload}` : String(r.experiment);
    // prefix-cache columns: "—" for rows stored before the judge recorded them
    const cache = [h("td", {class: "hit"}, rate(r.hit_rate)), h("td", {class: "b"}, rate(r.always_hit_rate)),
      h("td", null, num(r.evictions)), h("td", null, num(r.preemptions))];
    // failure columns ("—" for rows stored before the judge recorded them)
    const fail = [h("td", null, rate(r.meas_fail)), h("td", null, rate(r.pred_fail)),
      h("td", null, fin(r.fail_err_pts) ? r.fail_err_pts.toFixed(1) + " pts" : "—")];
    return h("tr", null, h("td", {class: "l", title: String(r.experiment)}, label), h("td", null, num(r.stage)),
      h("td", null, num(r.rate, 3)), cells, cache, fail);
  });
  const note = bname ? `“base” is the baseline ${bname} (lowest mean E2E error of the baselines); green: this program is better, red: worse.`
    : (loading ? "“base”: the best baseline, being computed (once per run, ~10–20 s)…" : "no valid baseline to compare with");
  return [h("p", {class: "muted small", id: "basenote"}, note),
          h("div", {class: "tw"}, h("table", {id: "errtable"}, h("thead", null, hd1, hd2), h("tbody", null, body)))];
}

init();

// E2E, TTFT and ITL error per experiment-stage: this program next to the best baseline
function drawStageErrors(gd, rec, rows, bname, bev) {
  const key = (r) => `${r.experiment}|${r.stage}`;
  const bmap = new Map(((bev && bev.rows) || []).map((r) => [key(r), r]));
  let cats = rows.map((r) => `${r.model} · ${r.workload} · s${r.stage}`);
  if (!rows.every((r) => r.model && r.workload) || new Set(cats).size !== cats.length) {
    cats = rows.map((r) => `${r.experiment} · s${r.stage}`);  // the ids where model · workload repeats
  }
  const data = [];
  [["e2e", "E2E"], ["ttft", "TTFT"], ["itl", "ITL"]].forEach(([m, lab], i) => {
    const ax = i ? String(i + 1) : "";
    const v = rows.map((r) => (fin(r[m + "_err"]) ? r[m + "_err"] : null));
    data.push({type: "bar", name: `#${rec.id}`, legendgroup: "p", showlegend: i === 0, x: cats, y: v, marker: {color: "#1f77b4"},
               xaxis: "x", yaxis: "y" + ax, hovertemplate: `%{x}<br>${lab} %{y:.3~%}<extra>#${rec.id}</extra>`});
    if (bev) {
      const bv = rows.map((r) => { const b = bmap.get(key(r)); return b && fin(b[m + "_err"]) ? b[m + "_err"] : null; });
      data.push({type: "bar", name: esc(bname), legendgroup: "b", showlegend: i === 0, x: cats, y: bv, marker: {color: "#98a2b3"},
                 xaxis: "x", yaxis: "y" + ax, hovertemplate: `%{x}<br>${lab} %{y:.3~%}<extra>${esc(bname)}</extra>`});
    }
  });
  const vals = data.flatMap((t) => t.y).filter((v) => v > 0);
  const log = vals.length > 1 && Math.max(...vals) / Math.min(...vals) > 30;
  const yax = (lab) => ({title: {text: lab, font: {size: 11}}, type: log ? "log" : "linear", tickformat: ".2~%", gridcolor: "#eef0f3"});
  const layout = {font: FONT, margin: {l: 58, r: 8, t: 10, b: 110}, barmode: "group", bargap: 0.25,
                  grid: {rows: 3, columns: 1, pattern: "coupled", roworder: "top to bottom"},
                  legend: {orientation: "h", x: 0, y: 1.0, yanchor: "bottom"},
                  yaxis: yax("E2E"), yaxis2: yax("TTFT"), yaxis3: yax("ITL"), xaxis: {tickangle: -35, tickfont: {size: 10}, automargin: true, type: "category"},
                  plot_bgcolor: "#fff", paper_bgcolor: "#fff"};
  Plotly.react(gd, data, layout, CONFIG);
}

// predicted against measured E2E, TTFT (s) and per-token time (ms), one mark per experiment-stage,
// log axes with the y = x line: a mark above the line is over-predicted
function drawPredMeas(gd, rows) {
  const data = [], layout = {font: FONT, margin: {l: 50, r: 8, t: 24, b: 40}, showlegend: false, hovermode: "closest",
                             grid: {rows: 1, columns: 3, pattern: "independent"}, annotations: [],
                             plot_bgcolor: "#fff", paper_bgcolor: "#fff"};
  [["e2e", "E2E (s)", 1], ["ttft", "TTFT (s)", 1], ["itl", "per-token (ms)", 1e3]].forEach(([m, lab, k], i) => {
    const ax = i ? String(i + 1) : "";
    const pts = rows.map((r) => [r["meas_" + m + "_s"], r["pred_" + m + "_s"], r])
      .filter(([x, y]) => fin(x) && fin(y) && x > 0 && y > 0).map(([x, y, r]) => [k * x, k * y, r]);
    if (!pts.length) return;
    const lo = Math.min(...pts.map(([x, y]) => Math.min(x, y))) / 1.3, hi = Math.max(...pts.map(([x, y]) => Math.max(x, y))) * 1.3;
    data.push({type: "scatter", mode: "lines", x: [lo, hi], y: [lo, hi], xaxis: "x" + ax, yaxis: "y" + ax, hoverinfo: "skip",
               line: {color: "#98a2b3", dash: "dash", width: 1}});
    data.push({type: "scatter", mode: "markers", x: pts.map((p) => p[0]), y: pts.map((p) => p[1]), xaxis: "x" + ax, yaxis: "y" + ax,
               marker: {color: ["#1f77b4", "#d62728", "#2ca02c"][i], size: 7, opacity: 0.85}, hoverinfo: "text",
               hovertext: pts.map(([x, y, r]) => `${esc(r.model || r.experiment)} · ${esc(r.workload || "")} · s${r.stage}<br>` +
                                                 `measured ${x.toPrecision(3)}<br>predicted ${y.toPrecision(3)}<br>error ${pct(Math.abs(y - x) / x)}`)});
    const axis = {type: "log", range: [Math.log10(lo), Math.log10(hi)], gridcolor: "#eef0f3", nticks: 4, exponentformat: "none"};
    layout["xaxis" + ax] = {...axis, title: {text: "measured", font: {size: 11}}};
    layout["yaxis" + ax] = {...axis, title: {text: i ? "" : "predicted", font: {size: 11}}};
    layout.annotations.push({text: lab, xref: "x" + ax + " domain", yref: "paper", x: 0.5, y: 1.08, showarrow: false});
  });
  Plotly.react(gd, data, layout, CONFIG);
}
