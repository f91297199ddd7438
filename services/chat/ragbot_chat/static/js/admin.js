// The admin page: index state (ingest's page list, the retriever's models, chat's readiness), the
// retrieval debug view (POST /ui/api/retrieve: every branch's candidates with scores, the fused list,
// rerank scores and cutoff, stage timings) and the Kol-Zchut get_config / set_config editor.

import { ApiError, api, el, formatScore } from "./common.js";

const TOP_ROWS = 20;
const STAGES = ["embed", "dense", "bm25", "fusion", "rerank", "total"];

// --- index state -------------------------------------------------------------------------------

const stateList = document.getElementById("index-state");

function fact(term, ...value) {
  return [el("dt", {}, term), el("dd", {}, ...value)];
}

async function loadState() {
  stateList.replaceChildren(...fact("Loading", "…"));
  const [pages, models, ready] = await Promise.allSettled([
    api("/ui/api/ingest/v1/pages?limit=1000"),
    api("/ui/api/models"),
    fetch("/readyz").then((r) => r.json()),
  ]);
  const facts = [];
  if (pages.status === "fulfilled") {
    const count = pages.value.pages.length;
    facts.push(...fact("Paragraphs", el("span", { id: "state-paragraphs" }, String(pages.value.indexed_paragraphs))));
    facts.push(...fact("Pages", el("span", { id: "state-pages" }, count >= 1000 ? "1000+" : String(count)), " ", el("a", { href: "/documents" }, "list")));
  } else {
    facts.push(...fact("Index", el("span", { class: "error-text" }, `ingest did not answer: ${pages.reason.message}`)));
  }
  if (models.status === "fulfilled") {
    const names = models.value.models.map((m) => `${m.name} (${m.dimension} dims: ${m.vector_fields.join(", ")})`);
    facts.push(...fact("Dense models", names.length ? names.join("; ") : "none (BM25 only)"));
  } else {
    facts.push(...fact("Retriever", el("span", { class: "error-text" }, `did not answer: ${models.reason.message}`)));
  }
  if (ready.status === "fulfilled" && ready.value.checks) {
    const checks = Object.entries(ready.value.checks).map(([name, ok]) => `${name} ${ok ? "✓" : "✗"}`);
    facts.push(...fact("Chat depends on", checks.join(" · ")));
  }
  stateList.replaceChildren(...facts);
}

document.getElementById("state-refresh").addEventListener("click", loadState);

// --- retrieval debug ---------------------------------------------------------------------------

const debugForm = document.getElementById("debug-form");
const debugStatus = document.getElementById("debug-status");
const debugResult = document.getElementById("debug-result");

function table(caption, headers, rows, attrs = {}) {
  return el("div", { class: "table-wrap" },
    el("table", attrs,
      el("caption", {}, caption),
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", { class: h.num ? "num" : undefined, scope: "col" }, h.label ?? h)))),
      el("tbody", {}, rows)));
}

function titleCell(title) {
  return el("td", { dir: "auto" }, title || "—");
}

function timings(ms) {
  const total = Math.max(ms.total || 0, ...STAGES.map((s) => ms[s] || 0), 0.001);
  const rows = [];
  for (const stage of [...STAGES, ...Object.keys(ms).filter((k) => !STAGES.includes(k))]) {
    if (!(stage in ms)) continue;
    const value = Number(ms[stage]);
    rows.push(
      el("span", {}, stage),
      el("span", { class: "bar-track" }, el("span", { class: "bar", dataset: { width: String(value / total) } })),
      el("span", { class: "num mono", dataset: { stage } }, `${value.toFixed(1)} ms`),
    );
  }
  const grid = el("div", { class: "timings", id: "debug-timings" }, rows);
  // Widths set through the CSSOM: the page's policy refuses inline style attributes.
  for (const bar of grid.querySelectorAll(".bar")) bar.style.width = `${Math.round(Number(bar.dataset.width) * 100)}%`;
  return grid;
}

function renderDebug(response) {
  const { debug, documents, timings_ms: ms } = response;
  const titles = new Map();
  for (const branch of Object.values(debug.branches || {})) {
    for (const c of branch.candidates) if (c.title) titles.set(c._id, c.title);
  }
  for (const d of documents) if (d.title) titles.set(d._id, d.title);
  const branchNames = Object.keys(debug.branches || {});

  const parts = [
    el("p", { class: "small" },
      `mode ${debug.mode} · fusion ${debug.fusion} · rrf k ${debug.rrf_k} · ${documents.length} paragraphs from ${(debug.pages || []).length} pages`),
    el("h3", {}, "Stage timings"),
    timings(ms || {}),
    el("h3", {}, "Candidates per branch"),
  ];

  const grid = el("div", { class: "grid-2" });
  for (const [name, branch] of Object.entries(debug.branches || {})) {
    const about = [branch.kind, branch.model, branch.field && `field ${branch.field}`, `weight ${branch.weight}`]
      .filter(Boolean).join(" · ");
    const dropped = branch.dropped_by_threshold ? ` · ${branch.dropped_by_threshold} under the threshold` : "";
    const rows = branch.candidates.slice(0, TOP_ROWS).map((c, i) =>
      el("tr", { dataset: { id: c._id } },
        el("td", { class: "num" }, String(i + 1)),
        el("td", { class: "num score" }, formatScore(c.score)),
        titleCell(c.title),
        el("td", { class: "num" }, String(c.page_id)),
        el("td", { class: "num" }, c.paragraph ?? "—")));
    const shown = branch.candidates.length > TOP_ROWS ? ` (top ${TOP_ROWS} of ${branch.candidates.length})` : ` (${branch.candidates.length})`;
    grid.append(
      el("div", { class: "branch", dataset: { branch: name, kind: branch.kind } },
        table(`${name}${shown}`, [{ label: "#", num: true }, { label: "Score", num: true }, "Title", { label: "Page", num: true }, { label: "¶", num: true }], rows),
        el("p", { class: "small muted" }, about + dropped)));
  }
  parts.push(grid);

  const fusedRows = (debug.fused || []).slice(0, TOP_ROWS).map((f, i) =>
    el("tr", { dataset: { id: f._id } },
      el("td", { class: "num" }, String(i + 1)),
      el("td", { class: "num score" }, formatScore(f.score)),
      ...branchNames.map((b) => el("td", { class: "num", title: f.raw_scores?.[b] !== undefined ? `raw ${formatScore(f.raw_scores[b])}` : undefined }, f.ranks?.[b] ?? "—")),
      titleCell(titles.get(f._id)),
      el("td", { class: "num" }, String(f.page_id))));
  parts.push(el("h3", {}, "Fused"), el("div", { id: "debug-fused" },
    table(`${debug.fusion} over ${branchNames.length} branches (rank in each branch; hover for its raw score)`,
      [{ label: "#", num: true }, { label: "Fused", num: true }, ...branchNames.map((b) => ({ label: b.replace(/_vectors$/, ""), num: true })), "Title", { label: "Page", num: true }],
      fusedRows)));

  parts.push(el("h3", {}, "Rerank"));
  if (debug.rerank) {
    const kept = debug.rerank.kept ?? debug.rerank.scores.length;
    const rows = debug.rerank.scores.map((s, i) =>
      el("tr", { class: i === kept && kept > 0 ? "cutoff" : i >= kept ? "dropped" : undefined, dataset: { id: s._id } },
        el("td", { class: "num" }, String(i + 1)),
        el("td", { class: "num score" }, formatScore(s.score)),
        titleCell(titles.get(s._id)),
        el("td", { class: "num" }, String(s.page_id)),
        el("td", {}, i < kept ? "kept" : "cut")));
    parts.push(el("div", { id: "debug-rerank" },
      table(`kept ${kept} of ${debug.rerank.scores.length}${debug.rerank.no_relevant_paragraphs ? ": no relevant paragraph" : ""} (the dashed line is the cutoff)`,
        [{ label: "#", num: true }, { label: "Rerank score", num: true }, "Title", { label: "Page", num: true }, ""], rows)));
  } else {
    parts.push(el("p", { class: "muted small", id: "debug-rerank" }, "Reranking was off for this query (no reranker configured, or rerank off)."));
  }

  const docRows = documents.map((d, i) =>
    el("tr", { dataset: { id: d._id } },
      el("td", { class: "num" }, String(i + 1)),
      el("td", { class: "num score" }, formatScore(d.score)),
      titleCell(d.title),
      el("td", { class: "num" }, String(d.page_id)),
      el("td", { class: "mono" }, d._id)));
  parts.push(el("h3", {}, "Returned (grouped by page)"), el("div", { id: "debug-documents" },
    table(`${documents.length} paragraphs, pages in order ${(debug.pages || []).join(", ") || "—"}`,
      [{ label: "#", num: true }, { label: "Score", num: true }, "Title", { label: "Page", num: true }, "Id"], docRows)));

  debugResult.replaceChildren(...parts);
}

function debugRequest() {
  const body = { query: document.getElementById("debug-query").value.trim() };
  const mode = document.getElementById("debug-mode").value;
  const fusion = document.getElementById("debug-fusion").value;
  const rerank = document.getElementById("debug-rerank").value;
  const size = Number(document.getElementById("debug-size").value);
  const plan = document.getElementById("debug-plan").value.split(",").map((n) => Number(n.trim())).filter((n) => n > 0);
  if (mode) body.mode = mode;
  if (fusion) body.fusion = fusion;
  if (rerank) body.rerank = rerank === "true";
  if (size > 0) body.retrieval_size = size;
  if (plan.length) body.paragraphs_per_page = plan;
  return body;
}

debugForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = debugRequest();
  if (!body.query) return;
  const run = document.getElementById("debug-run");
  run.disabled = true;
  debugStatus.textContent = "Retrieving…";
  const started = performance.now();
  try {
    const response = await api("/ui/api/retrieve", { method: "POST", body });
    renderDebug(response);
    debugStatus.textContent = `Done in ${Math.round(performance.now() - started)} ms`;
  } catch (err) {
    debugStatus.textContent = `Retrieval failed: ${err.message}`;
  } finally {
    run.disabled = false;
  }
});

// --- Kol-Zchut config editor -------------------------------------------------------------------

const configForm = document.getElementById("config-form");
const configFields = document.getElementById("config-fields");
const configStatus = document.getElementById("config-status");
const configVersion = document.getElementById("config-version");
let configShape = {};

function fieldFor(key, value, metadata) {
  const id = `cfg-${key}`;
  const errorId = `${id}-error`;
  const label = key.replace(/_/g, " ");
  const error = el("span", { class: "field-error", id: errorId, "aria-live": "polite" });
  const common = { id, name: key, "aria-describedby": errorId };
  let control;
  if (typeof value === "boolean") {
    control = el("input", { ...common, type: "checkbox" });
    control.checked = value;
    return el("div", { class: "field check", dataset: { field: key } }, control, el("label", { for: id }, label), error);
  }
  const models = metadata?.available_models ? Object.keys(metadata.available_models) : [];
  if (key === "model" && models.length) {
    control = el("select", common, models.map((m) => el("option", { value: m }, m)));
    control.value = value;
  } else if (typeof value === "number") {
    const temperature = metadata?.temperature_options;
    const step = key === "temperature" ? temperature?.step ?? 0.1 : Number.isInteger(value) ? 1 : "any";
    control = el("input", { ...common, type: "number", step, min: key === "temperature" ? temperature?.min : undefined, max: key === "temperature" ? temperature?.max : undefined });
    control.value = String(value);
  } else if (Array.isArray(value)) {
    control = el("input", { ...common, type: "text", placeholder: "comma-separated" });
    control.value = value.join(", ");
  } else if (typeof value === "string" && (key.endsWith("prompt") || value.length > 80 || value.includes("\n"))) {
    control = el("textarea", { ...common, dir: "auto", rows: "6" });
    control.value = value;
  } else {
    control = el("input", { ...common, type: "text", dir: "auto" });
    control.value = value ?? "";
  }
  return el("div", { class: "field", dataset: { field: key } }, el("label", { for: id }, label), control, error);
}

function clearErrors() {
  for (const node of configFields.querySelectorAll(".field-error")) node.textContent = "";
  for (const node of configFields.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
}

async function loadConfig() {
  configStatus.textContent = "Loading…";
  clearErrors();
  try {
    const [config, metadata] = await Promise.all([api("/get_config"), api("/get_config_metadata").catch(() => null)]);
    configShape = config;
    configVersion.textContent = `version ${config.version}`;
    configFields.replaceChildren(...Object.entries(config).filter(([k]) => k !== "version").map(([k, v]) => fieldFor(k, v, metadata)));
    configStatus.textContent = "";
  } catch (err) {
    configStatus.textContent = `Could not load the configuration: ${err.message}`;
  }
}

function configBody() {
  const body = {};
  for (const [key, original] of Object.entries(configShape)) {
    if (key === "version") continue;
    const control = document.getElementById(`cfg-${key}`);
    if (!control) continue;
    if (typeof original === "boolean") body[key] = control.checked;
    else if (typeof original === "number") body[key] = control.value.trim() === "" ? null : Number(control.value);
    else if (Array.isArray(original)) body[key] = control.value.split(",").map((s) => s.trim()).filter(Boolean);
    else body[key] = control.value;
  }
  return body;
}

function showErrors(err) {
  const details = Array.isArray(err.body?.detail) ? err.body.detail : [];
  const unplaced = [];
  let first = null;
  for (const detail of details) {
    const key = (detail.loc || []).filter((p) => p !== "body")[0];
    const control = key !== undefined && document.getElementById(`cfg-${key}`);
    if (control) {
      control.setAttribute("aria-invalid", "true");
      document.getElementById(`cfg-${key}-error`).textContent = detail.msg;
      first = first || control;
    } else {
      unplaced.push(detail.msg);
    }
  }
  configStatus.textContent = details.length
    ? `Not saved: ${details.length} problem${details.length > 1 ? "s" : ""}${unplaced.length ? `: ${unplaced.join("; ")}` : " (see the fields)"}`
    : `Not saved: ${err.message}`;
  if (first) first.focus();
}

configForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  clearErrors();
  const save = document.getElementById("config-save");
  save.disabled = true;
  configStatus.textContent = "Saving…";
  try {
    const stored = await api("/set_config", { method: "POST", body: configBody() });
    configShape = stored;
    configVersion.textContent = `version ${stored.version}`;
    configStatus.textContent = `Saved as version ${stored.version}`;
  } catch (err) {
    if (err instanceof ApiError && err.status === 422) showErrors(err);
    else configStatus.textContent = `Not saved: ${err.message}`;
  } finally {
    save.disabled = false;
  }
});

document.getElementById("config-reload").addEventListener("click", loadConfig);

loadState();
loadConfig();
