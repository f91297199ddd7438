// The documents page: uploads (drag and drop or the file chooser; one request per file so each has its
// own progress) to the ingest service through /ui/api/ingest, their jobs polled to the end, the
// indexed pages (GET /v1/pages) and the failed jobs with a Retry button.

import { api, csrfHeaders, el, errorMessage, formatDate, sleep } from "./common.js";
import { t } from "./i18n.js";

const INGEST = "/ui/api/ingest/v1";
const FINAL = new Set(["done", "skipped", "failed"]);
const PAGE_SIZE = 50;
const POLL_MS = 700;
const POLL_LIMIT_MS = 15 * 60 * 1000;

const input = document.getElementById("file-input");
const drop = document.getElementById("drop");
const uploads = document.getElementById("uploads");
const pagesBody = document.querySelector("#pages tbody");
const pagesSummary = document.getElementById("pages-summary");
const pagesRange = document.getElementById("pages-range");
const prev = document.getElementById("pages-prev");
const next = document.getElementById("pages-next");
const failedBody = document.querySelector("#failed tbody");
const failedSummary = document.getElementById("failed-summary");

let offset = 0;

// A job state's words (the state itself stays in data-state for scripts and tests).
const STATE_LABELS = {
  uploading: t("state.uploading"),
  accepted: t("state.accepted"),
  queued: t("state.queued"),
  running: t("state.running"),
  retrying: t("state.retrying"),
  done: t("state.done"),
  skipped: t("state.skipped"),
  failed: t("state.failed"),
};

function stateLabel(state) {
  return STATE_LABELS[state] ?? state;
}

function badge(state) {
  return el("span", { class: `badge ${state}`, dataset: { state } }, stateLabel(state));
}

/** Poll a job until it ends; onUpdate(record) after every answer. Resolves the final record. */
async function pollJob(jobId, onUpdate) {
  const deadline = Date.now() + POLL_LIMIT_MS;
  for (;;) {
    const record = await api(`${INGEST}/jobs/${encodeURIComponent(jobId)}`);
    onUpdate(record);
    if (FINAL.has(record.state)) return record;
    if (Date.now() > deadline) throw new Error(t("documents.job_still", { job: jobId, state: stateLabel(record.state) }));
    await sleep(POLL_MS);
  }
}

function sendFile(file, onProgress) {
  // XMLHttpRequest, not fetch: it reports upload progress.
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", `${INGEST}/documents`);
    xhr.setRequestHeader("Accept", "application/json");
    for (const [name, value] of Object.entries(csrfHeaders())) xhr.setRequestHeader(name, value);
    xhr.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) onProgress(event.loaded / event.total);
    });
    xhr.addEventListener("load", () => {
      let body = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        body = xhr.responseText;
      }
      if (xhr.status >= 200 && xhr.status < 300) resolve(body);
      else reject(new Error(errorMessage(xhr.status, body)));
    });
    xhr.addEventListener("error", () => reject(new Error(t("documents.upload_network"))));
    const data = new FormData();
    data.append("file", file, file.name);
    xhr.send(data);
  });
}

async function upload(file) {
  let state = badge("uploading");
  const progress = el("progress", { max: "100", value: "0", "aria-label": t("documents.upload_of", { name: file.name }) });
  const detail = el("span", { class: "detail" }, t("documents.kb", { kb: Math.max(1, Math.round(file.size / 1024)) }));
  const item = el("li", { class: "upload", dataset: { file: file.name, state: "uploading" } },
    el("span", { class: "name", dir: "auto", title: file.name }, file.name), state, progress, detail);
  uploads.prepend(item);
  const setState = (value, text) => {
    const next = badge(value);
    state.replaceWith(next);
    state = next;
    item.dataset.state = value;
    if (text !== undefined) detail.textContent = text;
  };
  try {
    const accepted = await sendFile(file, (fraction) => {
      progress.value = Math.round(fraction * 100);
    });
    progress.value = 100;
    const doc = accepted.documents[0];
    item.dataset.jobId = doc.job_id;
    item.dataset.pageId = doc.page_id;
    setState(doc.status, t("documents.waiting", { title: doc.title, id: doc.page_id }));
    const record = await pollJob(doc.job_id, (r) => {
      // A final state is shown below, with its text, in one step (tests wait on data-state).
      if (FINAL.has(r.state)) return;
      setState(r.state, r.state === "running" ? t("documents.running") : r.state === "retrying" ? t("documents.retrying", { error: r.error || "" }) : undefined);
    });
    if (record.state === "done") {
      const page = await api(`${INGEST}/pages/${doc.page_id}`);
      setState("done", t("documents.indexed", { id: page.page_id, revision: page.revision_id, paragraphs: page.paragraphs }));
    } else if (record.state === "skipped") {
      setState("skipped", record.detail || t("documents.already"));
    } else {
      setState("failed", record.error || stateLabel("failed"));
      loadFailed();
    }
    loadPages();
  } catch (err) {
    setState("failed", err.message);
  }
}

function uploadAll(files) {
  for (const file of files) upload(file);
}

input.addEventListener("change", () => {
  uploadAll([...input.files]);
  input.value = "";
});

for (const name of ["dragenter", "dragover"]) {
  drop.addEventListener(name, (event) => {
    event.preventDefault();
    drop.classList.add("dragging");
  });
}
for (const name of ["dragleave", "dragend"]) {
  drop.addEventListener(name, () => drop.classList.remove("dragging"));
}
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("dragging");
  uploadAll([...(event.dataTransfer?.files || [])]);
});
// Dropping a file anywhere else must not navigate away from the page.
window.addEventListener("dragover", (event) => event.preventDefault());
window.addEventListener("drop", (event) => event.preventDefault());

async function loadPages() {
  pagesSummary.textContent = t("common.loading");
  try {
    const body = await api(`${INGEST}/pages?limit=${PAGE_SIZE}&offset=${offset}`);
    pagesBody.replaceChildren(
      ...body.pages.map((p) =>
        el("tr", { dataset: { pageId: p.page_id } },
          el("td", { class: "num" }, String(p.page_id)),
          el("td", { dir: "auto" }, p.title || "—"),
          el("td", { class: "num" }, String(p.revision_id)),
          el("td", { class: "num" }, String(p.paragraphs)),
          el("td", {}, formatDate(p.last_update)))),
    );
    if (!body.pages.length) {
      pagesBody.append(el("tr", {}, el("td", { colspan: "5", class: "muted" }, offset ? t("documents.no_more") : t("documents.nothing"))));
    }
    pagesSummary.textContent = t("documents.paragraphs_indexed", { count: body.indexed_paragraphs });
    pagesRange.textContent = body.pages.length ? t("documents.range", { from: offset + 1, to: offset + body.pages.length }) : "";
    prev.disabled = offset === 0;
    next.disabled = body.pages.length < PAGE_SIZE;
  } catch (err) {
    pagesSummary.textContent = t("documents.list_failed", { error: err.message });
  }
}

prev.addEventListener("click", () => {
  offset = Math.max(0, offset - PAGE_SIZE);
  loadPages();
});
next.addEventListener("click", () => {
  offset += PAGE_SIZE;
  loadPages();
});
document.getElementById("pages-refresh").addEventListener("click", () => loadPages());

function failedRow(job) {
  const status = el("span", { class: "status retry-status", role: "status" });
  const retry = el("button", { type: "button", class: "retry", "aria-label": t("documents.retry_job", { job: job.job_id }) }, t("documents.retry"));
  const row = el("tr", { dataset: { jobId: job.job_id } },
    el("td", { class: "mono", title: job.job_id }, job.job_id.slice(0, 12)),
    el("td", {}, job.kind),
    el("td", { class: "num" }, job.page_id ?? "—"),
    el("td", { class: "num" }, String(job.attempts)),
    el("td", { class: "reason", dir: "auto" }, job.error || job.detail || "—"),
    el("td", {}, formatDate(job.updated_at)),
    el("td", {}, retry, " ", status));
  retry.addEventListener("click", async () => {
    retry.disabled = true;
    status.textContent = t("documents.requeuing");
    try {
      const accepted = await api(`${INGEST}/jobs/${encodeURIComponent(job.job_id)}/retry`, { method: "POST" });
      row.dataset.retried = "true";
      status.textContent = t("documents.requeued", { status: stateLabel(accepted.status) });
      const record = await pollJob(job.job_id, (r) => {
        status.textContent = t("documents.retry_state", { state: stateLabel(r.state) });
      });
      status.textContent = record.state === "failed" ? t("documents.retry_failed", { error: record.error || "" }) : t("documents.retry_state", { state: stateLabel(record.state) });
      if (record.state === "done") loadPages();
    } catch (err) {
      status.textContent = t("documents.retry_refused", { error: err.message });
    } finally {
      retry.disabled = false;
    }
  });
  return row;
}

async function loadFailed() {
  failedSummary.textContent = t("common.loading");
  try {
    const body = await api(`${INGEST}/jobs?state=failed&limit=100`);
    failedBody.replaceChildren(...body.jobs.map(failedRow));
    if (!body.jobs.length) failedBody.append(el("tr", {}, el("td", { colspan: "7", class: "muted" }, t("documents.no_failed"))));
    failedSummary.textContent = t("documents.failed_count", { count: body.jobs.length });
  } catch (err) {
    failedSummary.textContent = t("documents.failed_list_failed", { error: err.message });
  }
}

document.getElementById("failed-refresh").addEventListener("click", () => loadFailed());

loadPages();
loadFailed();
document.body.dataset.ready = "1";
