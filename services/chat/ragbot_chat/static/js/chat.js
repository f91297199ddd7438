// The chat page: a session per conversation (POST /v1/sessions), each question streamed from
// POST /v1/sessions/{id}/messages (SSE: sources, token..., done | error), the answer rendered as
// Markdown while it streams, its sources as pills, and thumbs up/down with an optional comment.

import { ApiError, api, directionOf, el, postStream } from "./common.js";
import { t, tn } from "./i18n.js";
import { linkHref } from "./links.js";
import { renderMarkdown } from "./markdown.js";

const SESSION_KEY = "ragbot.chat.session";

const form = document.getElementById("ask");
const question = document.getElementById("question");
const send = document.getElementById("send");
const modeSelect = document.getElementById("mode");
const messages = document.getElementById("messages");
const empty = document.getElementById("empty");
const sessionStatus = document.getElementById("session-status");

let sessionId = sessionStorage.getItem(SESSION_KEY);
let busy = false;
let controller = null;
let feedbackCount = 0;

function setBusy(value) {
  busy = value;
  send.disabled = value;
  form.setAttribute("aria-busy", value ? "true" : "false");
}

function showEmpty() {
  empty.hidden = messages.children.length > 0;
}

function nearBottom() {
  return window.innerHeight + window.scrollY >= document.body.scrollHeight - 120;
}

function scrollToEnd(force = false) {
  if (force || nearBottom()) window.scrollTo({ top: document.body.scrollHeight });
}

async function startSession() {
  // An empty choice leaves the mode to the server (RAGBOT_CHAT_DEFAULT_MODE); the select then shows it.
  const info = await api("/v1/sessions", { method: "POST", body: { mode: modeSelect.value || undefined } });
  modeSelect.value = info.mode;
  sessionId = info.session_id;
  sessionStorage.setItem(SESSION_KEY, sessionId);
  return sessionId;
}

function userMessage(text) {
  const dir = directionOf(text);
  return el("li", { class: "msg msg-user", dir, lang: dir === "rtl" ? "he" : "en" }, el("div", { class: "bubble", text }));
}

function percent(source) {
  return source.confidence_pct === null || source.confidence_pct === undefined ? null : `${source.confidence_pct}%`;
}

function pill(source, cited) {
  const conf = percent(source);
  const vars = { n: source.index, title: source.title, conf };
  const label = conf ? t("chat.source_label_conf", vars) : t("chat.source_label", vars);
  const body = [
    el("span", { class: "pill-n", "aria-hidden": "true" }, String(source.index)),
    el("span", { class: "pill-title", dir: "auto" }, source.title || t("common.page_n", { id: source.page_id })),
    conf ? el("span", { class: "pill-conf" }, conf) : null,
  ];
  const attrs = { class: `pill${cited ? " cited" : ""}`, title: source.title, "aria-label": label, dataset: { index: source.index } };
  const href = linkHref(source.url); // a page's javascript: URL stays text
  const node = href
    ? el("a", { ...attrs, href, target: "_blank", rel: "noopener noreferrer" }, body)
    : el("span", attrs, body);
  return el("li", {}, node);
}

function renderSources(container, label, sources, cited) {
  container.replaceChildren();
  if (!sources.length) return;
  container.append(
    el("span", { class: "sources-label", id: `${container.id}-label` }, label),
    el("ul", { class: "pills", "aria-labelledby": `${container.id}-label` }, sources.map((s) => pill(s, cited))),
  );
}

// A thumb drawn for this page (no icon font or emoji font needed); "down" is the same thumb turned over.
const THUMB = "M2 10h4v11H2z M8 10l4-8c1.7 0 3 1.3 3 3v4h5.5c1.4 0 2.4 1.3 2.1 2.6l-1.7 7.2c-.2.8-1 1.2-1.9 1.2H8z";

function thumb() {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  for (const [k, v] of Object.entries({ viewBox: "0 0 24 24", width: "18", height: "18", "aria-hidden": "true", focusable: "false" })) {
    svg.setAttribute(k, v);
  }
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", THUMB);
  path.setAttribute("fill", "currentColor");
  svg.append(path);
  return svg;
}

function feedbackControls(messageId) {
  feedbackCount += 1;
  const commentId = `comment-${feedbackCount}`;
  const status = el("span", { class: "status", role: "status", "aria-live": "polite" });
  let rating = null;
  const up = el("button", { type: "button", "aria-pressed": "false", "aria-label": t("chat.helpful"), title: t("chat.helpful"), class: "thumb-up" }, thumb());
  const down = el("button", { type: "button", "aria-pressed": "false", "aria-label": t("chat.not_helpful"), title: t("chat.not_helpful"), class: "thumb-down" }, thumb());
  const comment = el("textarea", { id: commentId, dir: "auto", rows: "2", maxlength: "5000", placeholder: t("chat.comment_placeholder") });
  const commentForm = el(
    "form",
    { hidden: true, class: "comment-form" },
    el("label", { for: commentId, class: "visually-hidden" }, t("chat.comment")),
    comment,
    el("button", { type: "submit" }, t("chat.send_comment")),
  );

  async function save(withComment) {
    const body = { rating, comment: withComment && comment.value.trim() ? comment.value.trim() : null };
    try {
      await api(`/v1/messages/${encodeURIComponent(messageId)}/feedback`, { method: "POST", body });
      status.textContent = rating === null ? t("chat.rating_withdrawn") : withComment ? t("chat.comment_saved") : t("chat.rating_saved");
    } catch (err) {
      status.textContent = t("chat.feedback_failed", { error: err.message });
    }
  }

  function choose(value) {
    rating = rating === value ? null : value;
    up.setAttribute("aria-pressed", String(rating === "up"));
    down.setAttribute("aria-pressed", String(rating === "down"));
    commentForm.hidden = rating === null;
    save(false);
    if (rating !== null) comment.focus();
  }

  up.addEventListener("click", () => choose("up"));
  down.addEventListener("click", () => choose("down"));
  commentForm.addEventListener("submit", (event) => {
    event.preventDefault();
    save(true);
  });
  return el("div", { class: "feedback", role: "group", "aria-label": t("chat.was_helpful") }, up, down, status, commentForm);
}

function botMessage() {
  const bubble = el("div", { class: "bubble markdown streaming", "aria-busy": "true" });
  const sources = el("div", { class: "sources", id: `sources-${Date.now()}-${Math.random().toString(36).slice(2, 7)}` });
  const meta = el("div", { class: "meta" });
  const item = el("li", { class: "msg msg-bot" }, bubble, sources, meta);
  return { item, bubble, sources, meta };
}

async function ask(text, { retried = false } = {}) {
  if (!sessionId) await startSession();
  const turn = botMessage();
  const dir = directionOf(text);
  turn.item.setAttribute("dir", dir);
  turn.item.setAttribute("lang", dir === "rtl" ? "he" : "en");
  if (!retried) messages.append(userMessage(text));
  messages.append(turn.item);
  showEmpty();
  scrollToEnd(true);

  let answer = "";
  let sources = [];
  let scheduled = false;
  const byIndex = (n) => sources.find((s) => s.index === n) || null;
  const render = () => {
    scheduled = false;
    turn.bubble.innerHTML = renderMarkdown(answer, { cite: byIndex });
    scrollToEnd();
  };
  const schedule = () => {
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(render);
    }
  };
  turn.bubble.textContent = t("chat.searching");
  controller = new AbortController();
  const started = performance.now();

  try {
    await postStream(
      `/v1/sessions/${encodeURIComponent(sessionId)}/messages`,
      { question: text, mode: modeSelect.value || undefined },
      (name, data) => {
        if (name === "sources") {
          sources = data.sources || [];
          turn.item.dataset.messageId = data.message_id;
          turn.bubble.textContent = sources.length ? tn("chat.reading", sources.length) : t("chat.thinking");
          renderSources(turn.sources, t("chat.retrieved"), sources, false);
        } else if (name === "token") {
          answer += data.text;
          schedule();
        } else if (name === "done") {
          answer = data.answer ?? answer;
          render();
          const cited = data.citations || [];
          if (cited.length) renderSources(turn.sources, t("chat.sources"), cited, true);
          else if (data.abstained || !sources.length) renderSources(turn.sources, "", [], false);
          turn.item.dataset.state = "done";
          const seconds = ((performance.now() - started) / 1000).toFixed(1);
          turn.meta.replaceChildren(el("span", {}, t("common.seconds", { seconds })));
          if (data.abstained) turn.meta.append(el("span", {}, t("chat.abstained")));
          turn.item.append(feedbackControls(data.message_id));
        } else if (name === "error") {
          turn.bubble.classList.add("error");
          turn.bubble.textContent = t("chat.no_answer", { error: data.message });
          turn.item.dataset.state = "error";
        }
      },
      { signal: controller.signal },
    );
  } catch (err) {
    if (err.name === "AbortError") {
      turn.item.dataset.state = "aborted";
      return;
    }
    if (err instanceof ApiError && err.status === 404 && !retried) {
      // The session expired: start a new one and ask again.
      turn.item.remove();
      sessionId = null;
      await ask(text, { retried: true });
      return;
    }
    turn.bubble.classList.add("error");
    turn.bubble.textContent = t("chat.no_answer", { error: err.message });
    turn.item.dataset.state = "error";
  } finally {
    turn.bubble.classList.remove("streaming");
    turn.bubble.removeAttribute("aria-busy");
    controller = null;
  }
}

async function restore() {
  if (!sessionId) return showEmpty();
  const restoring = sessionId;
  try {
    const session = await api(`/v1/sessions/${encodeURIComponent(restoring)}`);
    // "New chat" (or a first question) while this was loading: the turns belong to a conversation the
    // user has left, so they stay out of the one on screen.
    if (sessionId !== restoring) return;
    modeSelect.value = session.mode;
    for (const turn of session.turns) {
      messages.append(userMessage(turn.question));
      const bot = botMessage();
      const dir = directionOf(turn.question);
      bot.item.setAttribute("dir", dir);
      bot.item.dataset.state = "done";
      bot.bubble.classList.remove("streaming");
      bot.bubble.removeAttribute("aria-busy");
      bot.bubble.innerHTML = renderMarkdown(turn.answer);
      bot.item.append(feedbackControls(turn.message_id));
      messages.append(bot.item);
    }
    if (session.turns.length) sessionStatus.textContent = t("chat.restored");
  } catch {
    if (sessionId !== restoring) return;
    sessionId = null;
    sessionStorage.removeItem(SESSION_KEY);
  }
  showEmpty();
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = question.value.trim();
  if (!text || busy) return;
  question.value = "";
  setBusy(true);
  try {
    await ask(text);
  } catch (err) {
    sessionStatus.textContent = t("common.error", { error: err.message });
  } finally {
    setBusy(false);
    question.focus();
  }
});

question.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    form.requestSubmit();
  }
});

document.getElementById("new-chat").addEventListener("click", () => {
  if (controller) controller.abort();
  sessionId = null;
  sessionStorage.removeItem(SESSION_KEY);
  messages.replaceChildren();
  sessionStatus.textContent = t("chat.started");
  setTimeout(() => {
    sessionStatus.textContent = "";
  }, 4000);
  showEmpty();
  question.focus();
});

for (const button of document.querySelectorAll(".example")) {
  button.addEventListener("click", () => {
    question.value = button.textContent;
    form.requestSubmit();
  });
}

restore();
document.body.dataset.ready = "1"; // tests wait for the handlers before they type
