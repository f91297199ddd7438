// A small, safe Markdown renderer for LLM answers: HTML is escaped FIRST, then a known subset of
// Markdown becomes markup (paragraphs, headings, lists, quotes, fenced and inline code, bold, italics,
// http(s)/mailto links) and citation markers [n] become links to their sources. An unfinished
// answer (still streaming) renders too: an open code fence runs to the end.

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Escape text for HTML content and attribute values. */
export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const SAFE_URL = /^(https?:\/\/|mailto:)/i;

function inline(escaped, options) {
  // Code spans first, kept out of every other rule by placeholders.
  const codes = [];
  let text = escaped.replace(/`([^`\n]+)`/g, (_, code) => {
    codes.push(`<code>${code}</code>`);
    return `\u0000${codes.length - 1}\u0000`;
  });
  const links = [];
  const keep = (html) => {
    links.push(html);
    return `\u0001${links.length - 1}\u0001`;
  };
  // [text](url): the url was escaped with the rest, so it cannot close the attribute.
  text = text.replace(/\[([^\]\n]+)\]\(([^)\s]+)\)/g, (whole, label, url) => {
    const raw = url.replace(/&amp;/g, "&");
    if (!SAFE_URL.test(raw)) return whole;
    return keep(`<a href="${url}" target="_blank" rel="noopener noreferrer">${label}</a>`);
  });
  // Citation markers: [1], [2, 3] or [1][2].
  if (options.cite) {
    text = text.replace(/\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]/g, (whole, list) => {
      const parts = list.split(",").map((n) => Number(n.trim()));
      const rendered = parts.map((n) => {
        const source = options.cite(n);
        if (!source) return `[${n}]`;
        const title = escapeHtml(source.title || "");
        if (source.url && SAFE_URL.test(source.url)) {
          return `<a class="cite" href="${escapeHtml(source.url)}" target="_blank" rel="noopener noreferrer" title="${title}">[${n}]</a>`;
        }
        return `<span class="cite" title="${title}">[${n}]</span>`;
      });
      return keep(rendered.join(""));
    });
  }
  text = text
    .replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>")
    .replace(/__([^_\n]+)__/g, "<strong>$1</strong>")
    .replace(/(^|[^*\w])\*([^*\s][^*\n]*?)\*(?!\w)/g, "$1<em>$2</em>")
    .replace(/(^|[^_\w])_([^_\s][^_\n]*?)_(?!\w)/g, "$1<em>$2</em>");
  return text
    .replace(/\u0001(\d+)\u0001/g, (_, i) => links[Number(i)])
    .replace(/\u0000(\d+)\u0000/g, (_, i) => codes[Number(i)]);
}

/**
 * Render Markdown to HTML. `options.cite(n)` returns `{title, url}` for source n, or null.
 * Everything the text contains is escaped; only the markup below is produced.
 */
export function renderMarkdown(markdown, options = {}) {
  const lines = escapeHtml(markdown.replace(/\r\n?/g, "\n")).split("\n");
  const out = [];
  let paragraph = [];
  let list = null; // {tag, items}
  let quote = [];

  const flushParagraph = () => {
    if (paragraph.length) out.push(`<p>${paragraph.map((l) => inline(l, options)).join("<br>")}</p>`);
    paragraph = [];
  };
  const flushList = () => {
    if (list) out.push(`<${list.tag}>${list.items.map((i) => `<li>${inline(i, options)}</li>`).join("")}</${list.tag}>`);
    list = null;
  };
  const flushQuote = () => {
    if (quote.length) out.push(`<blockquote>${quote.map((l) => inline(l, options)).join("<br>")}</blockquote>`);
    quote = [];
  };
  const flushAll = () => {
    flushParagraph();
    flushList();
    flushQuote();
  };

  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i];
    const fence = line.match(/^\s*```/);
    if (fence) {
      flushAll();
      const code = [];
      i += 1;
      while (i < lines.length && !/^\s*```/.test(lines[i])) {
        code.push(lines[i]);
        i += 1;
      }
      out.push(`<pre><code>${code.join("\n")}</code></pre>`);
      continue;
    }
    if (!line.trim()) {
      flushAll();
      continue;
    }
    const heading = line.match(/^\s*(#{1,6})\s+(.*)$/);
    if (heading) {
      flushAll();
      const level = Math.min(6, heading[1].length + 2); // answers' headings stay small
      out.push(`<h${level}>${inline(heading[2], options)}</h${level}>`);
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flushAll();
      out.push("<hr>");
      continue;
    }
    const bullet = line.match(/^\s*[-*+]\s+(.*)$/);
    const numbered = line.match(/^\s*\d{1,3}[.)]\s+(.*)$/);
    if (bullet || numbered) {
      flushParagraph();
      flushQuote();
      const tag = bullet ? "ul" : "ol";
      if (!list || list.tag !== tag) {
        flushList();
        list = { tag, items: [] };
      }
      list.items.push((bullet || numbered)[1]);
      continue;
    }
    const quoted = line.match(/^\s*&gt;\s?(.*)$/);
    if (quoted) {
      flushParagraph();
      flushList();
      quote.push(quoted[1]);
      continue;
    }
    if (list && /^\s{2,}\S/.test(line)) {
      list.items[list.items.length - 1] += ` ${line.trim()}`;
      continue;
    }
    flushList();
    flushQuote();
    paragraph.push(line);
  }
  flushAll();
  return out.join("\n");
}
