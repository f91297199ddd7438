// LLM answers as GitHub-flavoured Markdown (tables, strikethrough, autolinks, lists, code) with the
// vendored marked, sanitised with the vendored DOMPurify; then citation markers [n] become links to
// their sources. Raw HTML in an answer is shown as text, never run; only http(s)/mailto links stay
// links; no images load. An unfinished answer (still streaming) renders too: an open code fence or a
// table with its last row half-written runs to the end.

import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.js";
import { directionOf } from "./common.js";
import { linkHref } from "./links.js";

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const SAFE_URL = /^(https?:\/\/|mailto:)/i;
const CITATION = /\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]/g;

/** Escape text for HTML content and attribute values. */
export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const markdown = new Marked({ gfm: true, breaks: true });
markdown.use({
  renderer: {
    html({ text }) {
      return escapeHtml(text); // an answer (or a paragraph it quotes) cannot inject markup
    },
    heading({ tokens, depth }) {
      const level = Math.min(6, depth + 2); // answers' headings stay small
      return `<h${level}>${this.parser.parseInline(tokens)}</h${level}>\n`;
    },
    image({ text }) {
      return escapeHtml(text || ""); // no request leaves the page for an answer's picture
    },
    link({ href, title, tokens }) {
      const label = this.parser.parseInline(tokens);
      if (!SAFE_URL.test(href || "")) return label;
      const titled = title ? ` title="${escapeHtml(title)}"` : "";
      return `<a href="${escapeHtml(href)}"${titled} target="_blank" rel="noopener noreferrer">${label}</a>`;
    },
  },
});

const purifier = DOMPurify(window);
purifier.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    if (!SAFE_URL.test(node.getAttribute("href") || "")) node.removeAttribute("href");
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});
const PURIFY = {
  FORBID_TAGS: ["img", "style", "form", "input", "button", "textarea", "select", "iframe", "svg", "math"],
  ADD_ATTR: ["target"],
};

function citationNode(n, cite) {
  const source = cite(n);
  if (!source) return document.createTextNode(`[${n}]`);
  const href = linkHref(source.url); // a source's URL is page data: http(s) only
  const node = document.createElement(href ? "a" : "span");
  node.className = "cite";
  node.title = source.title || "";
  node.textContent = `[${n}]`;
  if (href) {
    node.href = href;
    node.target = "_blank";
    node.rel = "noopener noreferrer";
  }
  return node;
}

// Citation markers in text (not in code or an existing link) become links to their sources.
function linkCitations(root, cite) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const texts = [];
  while (walker.nextNode()) texts.push(walker.currentNode);
  for (const node of texts) {
    const text = node.nodeValue;
    if (!text.includes("[") || node.parentElement?.closest("code, pre, a")) continue;
    const parts = document.createDocumentFragment();
    let last = 0;
    for (const match of text.matchAll(CITATION)) {
      parts.append(text.slice(last, match.index));
      for (const n of match[1].split(",")) parts.append(citationNode(Number(n.trim()), cite));
      last = match.index + match[0].length;
    }
    if (last === 0) continue;
    parts.append(text.slice(last));
    node.replaceWith(parts);
  }
}

/**
 * Render Markdown to HTML. `options.cite(n)` returns `{title, url}` for source n, or null.
 * The HTML is sanitised; only the markup Markdown produces survives.
 */
export function renderMarkdown(text, options = {}) {
  const html = markdown.parse(String(text ?? "").replace(/\r\n?/g, "\n"), { async: false });
  const fragment = purifier.sanitize(html, { ...PURIFY, RETURN_DOM_FRAGMENT: true });
  if (options.cite) linkCitations(fragment, options.cite);
  // Each block keeps its own direction (by its letters, as a question's): a Hebrew quote in an English
  // conversation still reads right to left.
  for (const block of fragment.querySelectorAll("p, li, blockquote, h3, h4, h5, h6")) {
    block.setAttribute("dir", directionOf(block.textContent));
  }
  for (const table of fragment.querySelectorAll("table")) {
    const scroller = document.createElement("div"); // a wide table scrolls, the page does not
    scroller.className = "table-scroll";
    table.replaceWith(scroller);
    scroller.append(table);
  }
  const holder = document.createElement("div");
  holder.append(fragment);
  return holder.innerHTML;
}
