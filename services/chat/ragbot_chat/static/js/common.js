// Helpers every page uses: JSON calls with readable errors, an SSE reader over fetch, text direction,
// and small DOM builders (text always goes in as text, never as HTML).

import { lang, t } from "./i18n.js";

/** An HTTP error with the server's message and, for 422, its per-field details. */
export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

/** The readable message of an error body: FastAPI's detail (string or list), or the status. */
export function errorMessage(status, body) {
  if (body && typeof body === "object") {
    const detail = body.detail ?? body.message ?? body.error?.message;
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) {
      return detail.map((d) => `${(d.loc || []).filter((p) => p !== "body").join(".")}: ${d.msg}`).join("; ");
    }
  }
  if (typeof body === "string" && body.trim()) return body.trim().slice(0, 300);
  return `HTTP ${status}`;
}

/** The signed-in page's CSRF token (the ragbot_csrf cookie), sent back on every write. */
export function csrfHeaders() {
  const match = document.cookie.match(/(?:^|;\s*)ragbot_csrf=([^;]+)/);
  return match ? { "X-CSRF-Token": decodeURIComponent(match[1]) } : {};
}

async function readBody(response) {
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** fetch + JSON: resolves the parsed body, rejects with ApiError on a non-2xx answer. */
export async function api(path, { method = "GET", body, headers = {}, signal } = {}) {
  const write = method !== "GET" && method !== "HEAD";
  const init = { method, headers: { Accept: "application/json", ...(write ? csrfHeaders() : {}), ...headers }, signal };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, t("common.network_error", { error: err.message }), null);
  }
  const parsed = await readBody(response);
  if (!response.ok) throw new ApiError(response.status, errorMessage(response.status, parsed), parsed);
  return parsed;
}

/**
 * POST and read a Server-Sent Events answer: calls onEvent(name, data) for each event (comments and
 * pings skipped). Rejects with ApiError when the answer is not a stream.
 */
export async function postStream(path, body, onEvent, { signal } = {}) {
  let response;
  try {
    response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream", ...csrfHeaders() },
      body: JSON.stringify(body),
      signal,
    });
  } catch (err) {
    throw new ApiError(0, t("common.network_error", { error: err.message }), null);
  }
  if (!response.ok || !(response.headers.get("content-type") || "").includes("text/event-stream")) {
    const parsed = await readBody(response);
    throw new ApiError(response.status, errorMessage(response.status, parsed), parsed);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const key = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (key === "event") name = val;
        else if (key === "data") data.push(val);
      }
      if (!data.length) continue;
      let parsed = data.join("\n");
      try {
        parsed = JSON.parse(parsed);
      } catch {
        /* plain text data */
      }
      onEvent(name, parsed);
    }
  }
}

const RTL_LETTER = /[\u0590-\u05FF\u0600-\u06FF\u0750-\u077F\uFB1D-\uFDFF\uFE70-\uFEFF]/g;
const LTR_LETTER = /[A-Za-z\u00C0-\u024F\u0370-\u03FF\u0400-\u04FF]/g;

/** "rtl" when right-to-left letters outnumber left-to-right ones (Hebrew with English terms stays rtl). */
export function directionOf(text) {
  const rtl = (String(text).match(RTL_LETTER) || []).length;
  const ltr = (String(text).match(LTR_LETTER) || []).length;
  return rtl > ltr ? "rtl" : "ltr";
}

/** Build an element: el("a", {href, class: "x", dataset: {...}, on: {click}}, child, "text"). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** A date as the reader's local date and time (or "—"). */
export function formatDate(value) {
  if (!value) return "—";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString(lang);
}

/** A score with a sensible number of digits. */
export function formatScore(value) {
  if (value === null || value === undefined || Number.isNaN(Number(value))) return "—";
  const n = Number(value);
  return Math.abs(n) >= 100 ? n.toFixed(1) : Math.abs(n) >= 1 ? n.toFixed(3) : n.toFixed(4);
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
