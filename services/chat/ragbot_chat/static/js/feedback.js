// The admin page's feedback review (GET /v1/feedback): the pages the worst-rated answers cite, worst
// first, and the answers themselves with their question, comment and links to their source pages; the
// export links follow the same filters.

import { api, directionOf, el, formatDate } from "./common.js";

const form = document.getElementById("feedback-form");
const status = document.getElementById("feedback-status");
const pagesBox = document.getElementById("feedback-pages");
const entriesBox = document.getElementById("feedback-entries");
const LIMIT = 200;

function filters() {
  const params = new URLSearchParams();
  const rating = document.getElementById("feedback-rating").value;
  const since = document.getElementById("feedback-since").value;
  const page = document.getElementById("feedback-page").value;
  if (rating) params.set("rating", rating);
  if (since) params.set("since", new Date(`${since}T00:00:00`).toISOString());
  if (page) params.set("page", page);
  return params;
}

/** A link to a source page, only for http(s) URLs (anything else stays plain text). */
function sourceLink(source) {
  const label = source.title || `page ${source.page_id}`;
  const safe = typeof source.url === "string" && /^https?:\/\//i.test(source.url);
  return safe
    ? el("a", { href: source.url, target: "_blank", rel: "noopener noreferrer", dir: "auto", class: "feedback-source", dataset: { pageId: String(source.page_id) } }, label)
    : el("span", { dir: "auto", class: "feedback-source" }, label);
}

function joined(nodes) {
  const out = [];
  nodes.forEach((node, i) => {
    if (i) out.push(", ");
    out.push(node);
  });
  return out;
}

function pagesTable(pages) {
  if (!pages.length) return el("p", { class: "muted" }, "No cited pages.");
  const rows = pages.slice(0, 20).map((p) =>
    el("tr", {},
      el("td", {}, sourceLink(p)),
      el("td", { class: "num" }, String(p.down)),
      el("td", { class: "num" }, String(p.up))));
  return el("div", { class: "table-wrap" },
    el("table", { id: "feedback-pages-table" },
      el("caption", {}, "Pages behind the listed answers (most down-rated first)"),
      el("thead", {}, el("tr", {},
        el("th", { scope: "col" }, "Page"),
        el("th", { scope: "col", class: "num" }, "👎"),
        el("th", { scope: "col", class: "num" }, "👍"))),
      el("tbody", {}, rows)));
}

function entriesTable(entries, truncated) {
  if (!entries.length) return el("p", { class: "muted", id: "feedback-empty" }, "No feedback matches.");
  const rows = entries.map((e) =>
    el("tr", { class: "feedback-entry", dataset: { messageId: e.message_id, rating: e.rating || "" } },
      el("td", {}, formatDate(e.feedback_at)),
      el("td", {}, el("span", { class: `badge ${e.rating === "down" ? "failed" : e.rating === "up" ? "done" : ""}` }, e.rating || "—")),
      el("td", { dir: directionOf(e.question) }, e.question),
      el("td", { dir: directionOf(e.answer) },
        el("details", {}, el("summary", {}, `${e.answer.slice(0, 80)}${e.answer.length > 80 ? "…" : ""}`), e.answer)),
      el("td", { dir: "auto", class: "feedback-comment" }, e.comment || "—"),
      el("td", {}, ...joined(e.sources.map(sourceLink)))));
  return el("div", { class: "table-wrap" },
    el("table", { id: "feedback-table" },
      el("caption", {}, truncated ? `The newest ${entries.length} answers (more match)` : `${entries.length} answers`),
      el("thead", {}, el("tr", {},
        ...["When", "Rating", "Question", "Answer", "Comment", "Sources"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, rows)));
}

async function load() {
  const params = filters();
  for (const [id, format] of [["feedback-csv", "csv"], ["feedback-jsonl", "jsonl"]]) {
    const exportParams = new URLSearchParams(params);
    exportParams.set("format", format);
    document.getElementById(id).setAttribute("href", `/v1/feedback?${exportParams}`);
  }
  params.set("limit", String(LIMIT));
  status.textContent = "Loading…";
  try {
    const body = await api(`/v1/feedback?${params}`);
    pagesBox.replaceChildren(pagesTable(body.pages));
    entriesBox.replaceChildren(entriesTable(body.entries, body.truncated));
    status.textContent = `${body.entries.length}${body.truncated ? "+" : ""} answers`;
  } catch (err) {
    status.textContent = `Could not load feedback: ${err.message}`;
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  load();
});

load();
