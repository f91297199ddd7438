// The admin page's feedback review (GET /v1/feedback): the pages the worst-rated answers cite, worst
// first, and the answers themselves with their question, comment and links to their source pages; the
// export links follow the same filters.

import { api, directionOf, el, formatDate } from "./common.js";
import { t, tn } from "./i18n.js";
import { linkHref } from "./links.js";

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
  const label = source.title || t("common.page_n", { id: source.page_id });
  const href = linkHref(source.url);
  return href
    ? el("a", { href, target: "_blank", rel: "noopener noreferrer", dir: "auto", class: "feedback-source", dataset: { pageId: String(source.page_id) } }, label)
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
  if (!pages.length) return el("p", { class: "muted" }, t("admin.feedback.no_pages"));
  const rows = pages.slice(0, 20).map((p) =>
    el("tr", {},
      el("td", {}, sourceLink(p)),
      el("td", { class: "num" }, String(p.down)),
      el("td", { class: "num" }, String(p.up))));
  return el("div", { class: "table-wrap" },
    el("table", { id: "feedback-pages-table" },
      el("caption", {}, t("admin.feedback.pages_caption")),
      el("thead", {}, el("tr", {},
        el("th", { scope: "col" }, t("common.col.page")),
        el("th", { scope: "col", class: "num", "aria-label": t("feedback.rating.down") }, "👎"),
        el("th", { scope: "col", class: "num", "aria-label": t("feedback.rating.up") }, "👍"))),
      el("tbody", {}, rows)));
}

function entriesTable(entries, truncated) {
  if (!entries.length) return el("p", { class: "muted", id: "feedback-empty" }, t("admin.feedback.none"));
  const rows = entries.map((e) =>
    el("tr", { class: "feedback-entry", dataset: { messageId: e.message_id, rating: e.rating || "" } },
      el("td", {}, formatDate(e.feedback_at)),
      el("td", {}, el("span", { class: `badge ${e.rating === "down" ? "failed" : e.rating === "up" ? "done" : ""}` }, e.rating === "up" ? t("feedback.rating.up") : e.rating === "down" ? t("feedback.rating.down") : "—")),
      el("td", { dir: directionOf(e.question) }, e.question),
      el("td", { dir: directionOf(e.answer) },
        el("details", {}, el("summary", {}, `${e.answer.slice(0, 80)}${e.answer.length > 80 ? "…" : ""}`), e.answer)),
      el("td", { dir: "auto", class: "feedback-comment" }, e.comment || "—"),
      el("td", {}, ...joined(e.sources.map(sourceLink)))));
  return el("div", { class: "table-wrap" },
    el("table", { id: "feedback-table" },
      el("caption", {}, truncated ? t("admin.feedback.newest", { count: entries.length }) : tn("admin.feedback.answers", entries.length)),
      el("thead", {}, el("tr", {},
        ...[t("admin.feedback.col.when"), t("admin.feedback.rating"), t("admin.feedback.col.question"), t("admin.feedback.col.answer"), t("admin.feedback.col.comment"), t("chat.sources")].map((h) => el("th", { scope: "col" }, h)))),
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
  status.textContent = t("common.loading");
  try {
    const body = await api(`/v1/feedback?${params}`);
    pagesBox.replaceChildren(pagesTable(body.pages));
    entriesBox.replaceChildren(entriesTable(body.entries, body.truncated));
    status.textContent = body.truncated ? t("admin.feedback.more", { count: body.entries.length }) : tn("admin.feedback.answers", body.entries.length);
  } catch (err) {
    status.textContent = t("admin.feedback.failed", { error: err.message });
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  load();
});

load();
