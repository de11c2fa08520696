// A small Markdown renderer that builds DOM nodes, never HTML: headings,
// paragraphs, lists, quotes, fenced code, tables, rules; inline code,
// strong, emphasis, links. HTML an agent writes stays literal text. A link
// is made only for http:, https: and mailto: targets; any other (javascript:,
// data:, a relative path) is shown as its text.

import { el } from "./dom.js";

const SAFE = new Set(["http:", "https:", "mailto:"]);

export function safeUrl(target) {
  try {
    const url = new URL(target);
    return SAFE.has(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

function link(text, target) {
  const href = safeUrl(target.trim());
  if (!href) return document.createTextNode(`[${text}](${target})`);
  return el("a", { href, target: "_blank", rel: "noopener noreferrer nofollow" }, ...inline(text));
}

// Inline spans: `code`, **strong**, *em* / _em_, [text](url), <http://url>.
export function inline(text) {
  const out = [];
  const pattern = /`([^`]+)`|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|(?<![\w])_([^_\s][^_]*)_(?![\w])|\[([^\]]*)\]\(([^)\s]*)\)|<((?:https?|mailto):[^>\s]+)>/g;
  let last = 0;
  for (const m of text.matchAll(pattern)) {
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    if (m[1] !== undefined) out.push(el("code", { text: m[1] }));
    else if (m[2] !== undefined || m[3] !== undefined) out.push(el("strong", {}, ...inline(m[2] ?? m[3])));
    else if (m[4] !== undefined || m[5] !== undefined) out.push(el("em", {}, ...inline(m[4] ?? m[5])));
    else if (m[6] !== undefined) out.push(link(m[6], m[7]));
    else if (m[8] !== undefined) out.push(link(m[8], m[8]));
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

const FENCE = /^\s*(```+|~~~+)\s*([\w+-]*)\s*$/;
const HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
const BULLET = /^\s*[-*+]\s+(.*)$/;
const ORDERED = /^\s*(\d+)[.)]\s+(.*)$/;
const QUOTE = /^\s*>\s?(.*)$/;
const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

const cells = (line) => line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());

// The whole text as a list of block nodes.
export function render(text) {
  const lines = String(text || "").split(/\r?\n/);
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) {
      i++;
    } else if ((m = FENCE.exec(line))) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(m[1])) body.push(lines[i++]);
      i++;
      blocks.push(el("pre", { class: "code" }, el("code", { text: body.join("\n"), dataset: { lang: m[2] || "" } })));
    } else if ((m = HEADING.exec(line))) {
      blocks.push(el(`h${Math.min(6, m[1].length + 2)}`, {}, ...inline(m[2])));
      i++;
    } else if (RULE.test(line)) {
      blocks.push(el("hr"));
      i++;
    } else if (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes("-")) {
      const head = cells(line);
      i += 2;
      const rows = [];
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) rows.push(cells(lines[i++]));
      blocks.push(
        el(
          "table",
          {},
          el("thead", {}, el("tr", {}, head.map((c) => el("th", {}, ...inline(c))))),
          el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, ...inline(c)))))),
        ),
      );
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        i++;
      }
      blocks.push(el("blockquote", {}, ...render(body.join("\n"))));
    } else if (BULLET.test(line) || ORDERED.test(line)) {
      const ordered = !BULLET.test(line);
      const items = [];
      while (i < lines.length && lines[i].trim()) {
        const item = (ordered ? ORDERED : BULLET).exec(lines[i]);
        if (item) items.push(ordered ? item[2] : item[1]);
        else if (/^\s+\S/.test(lines[i]) && items.length) items[items.length - 1] += " " + lines[i].trim();
        else break;
        i++;
      }
      blocks.push(el(ordered ? "ol" : "ul", {}, items.map((t) => el("li", {}, ...inline(t)))));
    } else {
      const body = [];
      while (
        i < lines.length &&
        lines[i].trim() &&
        !FENCE.test(lines[i]) &&
        !HEADING.test(lines[i]) &&
        !BULLET.test(lines[i]) &&
        !ORDERED.test(lines[i]) &&
        !QUOTE.test(lines[i])
      ) {
        body.push(lines[i++]);
      }
      const p = el("p");
      body.forEach((b, n) => {
        if (n) p.append(el("br"));
        p.append(...inline(b));
      });
      blocks.push(p);
    }
  }
  return blocks;
}
