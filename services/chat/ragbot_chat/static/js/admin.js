// The admin page: index state (ingest's page list, the retriever's models, chat's readiness), the
// retrieval debug view (POST /ui/api/retrieve: every branch's candidates with scores, the fused list,
// rerank scores and cutoff, stage timings) and the Kol-Zchut get_config / set_config editor.

import { ApiError, api, el, formatScore } from "./common.js";
import { t, tn } from "./i18n.js";

const TOP_ROWS = 20;
const STAGES = ["embed", "dense", "bm25", "fusion", "rerank", "total"];
// The stages' names in the page's language (another stage keeps its own name).
const STAGE_LABELS = {
  embed: t("admin.stage.embed"),
  dense: t("admin.stage.dense"),
  bm25: t("admin.stage.bm25"),
  fusion: t("admin.stage.fusion"),
  rerank: t("admin.stage.rerank"),
  total: t("admin.stage.total"),
};

// --- index state -------------------------------------------------------------------------------

const stateList = document.getElementById("index-state");

function fact(term, ...value) {
  return [el("dt", {}, term), el("dd", {}, ...value)];
}

async function loadState() {
  stateList.replaceChildren(...fact(t("common.loading"), ""));
  const [pages, models, ready] = await Promise.allSettled([
    api("/ui/api/ingest/v1/pages?limit=1000"),
    api("/ui/api/models"),
    fetch("/readyz").then((r) => r.json()),
  ]);
  const facts = [];
  if (pages.status === "fulfilled") {
    const count = pages.value.pages.length;
    facts.push(...fact(t("admin.state.paragraphs"), el("span", { id: "state-paragraphs" }, String(pages.value.indexed_paragraphs))));
    facts.push(...fact(t("admin.state.pages"), el("span", { id: "state-pages" }, count >= 1000 ? "1000+" : String(count)), " ", el("a", { href: "/documents" }, t("admin.state.list"))));
  } else {
    facts.push(...fact(t("admin.state.index"), el("span", { class: "error-text" }, t("admin.state.ingest_down", { error: pages.reason.message }))));
  }
  if (models.status === "fulfilled") {
    const names = models.value.models.map((m) => t("admin.state.model", { name: m.name, dims: m.dimension, fields: m.vector_fields.join(", ") }));
    facts.push(...fact(t("admin.state.models"), names.length ? names.join("; ") : t("admin.state.no_models")));
  } else {
    facts.push(...fact(t("admin.state.retriever"), el("span", { class: "error-text" }, t("admin.state.down", { error: models.reason.message }))));
  }
  if (ready.status === "fulfilled" && ready.value.checks) {
    const checks = Object.entries(ready.value.checks).map(([name, ok]) => `${name} ${ok ? "✓" : "✗"}`);
    facts.push(...fact(t("admin.state.checks"), el("span", { dir: "ltr" }, checks.join(" · "))));
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
      el("span", {}, STAGE_LABELS[stage] ?? stage),
      el("span", { class: "bar-track" }, el("span", { class: "bar", dataset: { width: String(value / total) } })),
      el("span", { class: "num mono", dataset: { stage } }, t("common.ms", { ms: value.toFixed(1) })),
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
      t("admin.debug.summary", { mode: debug.mode, fusion: debug.fusion, k: debug.rrf_k, paragraphs: documents.length, pages: (debug.pages || []).length })),
    el("h3", {}, t("admin.debug.timings")),
    timings(ms || {}),
    el("h3", {}, t("admin.debug.branches")),
  ];

  const grid = el("div", { class: "grid-2" });
  for (const [name, branch] of Object.entries(debug.branches || {})) {
    const about = [branch.kind, branch.model, branch.field && t("admin.debug.field", { field: branch.field }), t("admin.debug.weight", { weight: branch.weight })]
      .filter(Boolean).join(" · ");
    const dropped = branch.dropped_by_threshold ? ` · ${t("admin.debug.dropped", { count: branch.dropped_by_threshold })}` : "";
    const rows = branch.candidates.slice(0, TOP_ROWS).map((c, i) =>
      el("tr", { dataset: { id: c._id } },
        el("td", { class: "num" }, String(i + 1)),
        el("td", { class: "num score" }, formatScore(c.score)),
        titleCell(c.title),
        el("td", { class: "num" }, String(c.page_id)),
        el("td", { class: "num" }, c.paragraph ?? "—")));
    const shown = branch.candidates.length > TOP_ROWS ? ` (${t("admin.debug.top", { top: TOP_ROWS, count: branch.candidates.length })})` : ` (${branch.candidates.length})`;
    grid.append(
      el("div", { class: "branch", dataset: { branch: name, kind: branch.kind } },
        table(`${name}${shown}`, [{ label: "#", num: true }, { label: t("admin.col.score"), num: true }, t("common.col.title"), { label: t("common.col.page"), num: true }, { label: "¶", num: true }], rows),
        el("p", { class: "small muted" }, about + dropped)));
  }
  parts.push(grid);

  const fusedRows = (debug.fused || []).slice(0, TOP_ROWS).map((f, i) =>
    el("tr", { dataset: { id: f._id } },
      el("td", { class: "num" }, String(i + 1)),
      el("td", { class: "num score" }, formatScore(f.score)),
      ...branchNames.map((b) => el("td", { class: "num", title: f.raw_scores?.[b] !== undefined ? t("admin.debug.raw", { score: formatScore(f.raw_scores[b]) }) : undefined }, f.ranks?.[b] ?? "—")),
      titleCell(titles.get(f._id)),
      el("td", { class: "num" }, String(f.page_id))));
  parts.push(el("h3", {}, t("admin.debug.fused")), el("div", { id: "debug-fused" },
    table(t("admin.debug.fused_caption", { fusion: debug.fusion, count: branchNames.length }),
      [{ label: "#", num: true }, { label: t("admin.debug.fused"), num: true }, ...branchNames.map((b) => ({ label: b.replace(/_vectors$/, ""), num: true })), t("common.col.title"), { label: t("common.col.page"), num: true }],
      fusedRows)));

  parts.push(el("h3", {}, t("admin.debug.rerank")));
  if (debug.rerank) {
    const kept = debug.rerank.kept ?? debug.rerank.scores.length;
    const rows = debug.rerank.scores.map((s, i) =>
      el("tr", { class: i === kept && kept > 0 ? "cutoff" : i >= kept ? "dropped" : undefined, dataset: { id: s._id } },
        el("td", { class: "num" }, String(i + 1)),
        el("td", { class: "num score" }, formatScore(s.score)),
        titleCell(titles.get(s._id)),
        el("td", { class: "num" }, String(s.page_id)),
        el("td", {}, i < kept ? t("admin.debug.kept") : t("admin.debug.cut"))));
    parts.push(el("div", { id: "debug-rerank" },
      table(debug.rerank.no_relevant_paragraphs
        ? t("admin.debug.rerank_none", { kept, count: debug.rerank.scores.length })
        : t("admin.debug.rerank_caption", { kept, count: debug.rerank.scores.length }),
        [{ label: "#", num: true }, { label: t("admin.col.rerank_score"), num: true }, t("common.col.title"), { label: t("common.col.page"), num: true }, ""], rows)));
  } else {
    parts.push(el("p", { class: "muted small", id: "debug-rerank" }, t("admin.debug.rerank_off")));
  }

  const docRows = documents.map((d, i) =>
    el("tr", { dataset: { id: d._id } },
      el("td", { class: "num" }, String(i + 1)),
      el("td", { class: "num score" }, formatScore(d.score)),
      titleCell(d.title),
      el("td", { class: "num" }, String(d.page_id)),
      el("td", { class: "mono" }, d._id)));
  parts.push(el("h3", {}, t("admin.debug.returned")), el("div", { id: "debug-documents" },
    table(t("admin.debug.returned_caption", { count: documents.length, pages: (debug.pages || []).join(", ") || "—" }),
      [{ label: "#", num: true }, { label: t("admin.col.score"), num: true }, t("common.col.title"), { label: t("common.col.page"), num: true }, t("admin.col.id")], docRows)));

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
  debugStatus.textContent = t("admin.debug.running");
  const started = performance.now();
  try {
    const response = await api("/ui/api/retrieve", { method: "POST", body });
    renderDebug(response);
    debugStatus.textContent = t("admin.debug.done", { ms: Math.round(performance.now() - started) });
  } catch (err) {
    debugStatus.textContent = t("admin.debug.failed", { error: err.message });
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
// The Kol-Zchut settings' names in the page's language (a field added later shows its own name).
const CONFIG_LABELS = {
  model: t("admin.config.field.model"),
  num_of_pages: t("admin.config.field.num_of_pages"),
  add_current_page_to_search: t("admin.config.field.add_current_page_to_search"),
  temperature: t("admin.config.field.temperature"),
  system_prompt: t("admin.config.field.system_prompt"),
  user_prompt: t("admin.config.field.user_prompt"),
  banned_fields: t("admin.config.field.banned_fields"),
  rephrase_prompt: t("admin.config.field.rephrase_prompt"),
};

function fieldFor(key, value, metadata) {
  const id = `cfg-${key}`;
  const errorId = `${id}-error`;
  const label = CONFIG_LABELS[key] ?? key.replace(/_/g, " ");
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
    control = el("input", { ...common, type: "text", placeholder: t("admin.config.comma") });
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
  configStatus.textContent = t("common.loading");
  clearErrors();
  try {
    const [config, metadata] = await Promise.all([api("/get_config"), api("/get_config_metadata").catch(() => null)]);
    configShape = config;
    configVersion.textContent = t("admin.config.version", { version: config.version });
    configFields.replaceChildren(...Object.entries(config).filter(([k]) => k !== "version").map(([k, v]) => fieldFor(k, v, metadata)));
    configStatus.textContent = "";
  } catch (err) {
    configStatus.textContent = t("admin.config.load_failed", { error: err.message });
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
    ? unplaced.length
      ? tn("admin.config.problems_listed", details.length, { problems: unplaced.join("; ") })
      : tn("admin.config.problems", details.length)
    : t("admin.config.not_saved", { error: err.message });
  if (first) first.focus();
}

configForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  clearErrors();
  const save = document.getElementById("config-save");
  save.disabled = true;
  configStatus.textContent = t("admin.config.saving");
  try {
    const stored = await api("/set_config", { method: "POST", body: configBody() });
    configShape = stored;
    configVersion.textContent = t("admin.config.version", { version: stored.version });
    configStatus.textContent = t("admin.config.saved", { version: stored.version });
  } catch (err) {
    if (err instanceof ApiError && err.status === 422) showErrors(err);
    else configStatus.textContent = t("admin.config.not_saved", { error: err.message });
  } finally {
    save.disabled = false;
  }
});

document.getElementById("config-reload").addEventListener("click", loadConfig);

loadState();
loadConfig();
document.body.dataset.ready = "1";
