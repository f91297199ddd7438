// The page's messages: the catalogue of its language (static/i18n/<lang>.json), embedded by the server
// in <script id="ragbot-messages">. t("key", {name}) fills {name} placeholders; tn picks the plural
// form (key.one / key.other) by the page's language.

const holder = document.getElementById("ragbot-messages");
const messages = holder ? JSON.parse(holder.textContent) : {};

/** The page's language ("he" or "en"), as the server rendered it. */
export const lang = document.documentElement.lang || "en";

/** The message `key` with its {placeholders} filled from `vars` (the key itself when missing). */
export function t(key, vars = {}) {
  const text = messages[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (whole, name) => (name in vars ? String(vars[name]) : whole));
}

const plurals = new Intl.PluralRules(lang);

/** The plural form of `key` for `count` (`key.one` or `key.other`), with {count} filled. */
export function tn(key, count, vars = {}) {
  const form = plurals.select(count) === "one" ? "one" : "other";
  return t(`${key}.${form}`, { count, ...vars });
}
