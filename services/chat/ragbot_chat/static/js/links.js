// The one rule for URLs that come from page data (source pills, citations, feedback, the Kol-Zchut
// pages): only an http(s) URL becomes a link; anything else (javascript:, data:, vbscript:, relative)
// stays plain text. The Kol-Zchut pages get this file inlined by the server (ragbot_chat.kolzchut_pages).

const LINKABLE = /^https?:\/\/\S/i;

/** The URL to put in an href, or null when it must not become a link. */
export function linkHref(url) {
  if (typeof url !== "string") return null;
  const trimmed = url.trim();
  return LINKABLE.test(trimmed) ? trimmed : null;
}
