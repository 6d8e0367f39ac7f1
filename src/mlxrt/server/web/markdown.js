// A small Markdown renderer for the chat page: fenced code blocks, inline code, headings, bold,
// italics, links, lists, block quotes, rules and paragraphs. The text is HTML-escaped before any
// markup is added, so nothing a model writes can become markup of its own.
"use strict";

function escapeHtml(text) {
  const entities = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  return text.replace(/[&<>"']/g, (c) => entities[c]);
}

function renderInline(text) {
  // Code spans are set aside first, so nothing inside them is formatted.
  const spans = [];
  let html = escapeHtml(text).replace(/`([^`\n]+)`/g, (_, code) => `\u0000${spans.push(code) - 1}\u0000`);
  html = html
    .replace(/\*\*(\S(?:.*?\S)?)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^\w*])\*(\S(?:.*?\S)?)\*(?!\w)/g, "$1<em>$2</em>")
    .replace(/(^|[^\w_])_(\S(?:.*?\S)?)_(?!\w)/g, "$1<em>$2</em>")
    .replace(/\[([^\]]+)\]\((https?:\/\/[^\s()]+)\)/g, '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>');
  return html.replace(/\u0000(\d+)\u0000/g, (_, i) => `<code>${spans[i]}</code>`);
}

function renderCodeBlock(lang, code) {
  const label = lang ? `<span>${escapeHtml(lang)}</span>` : "<span></span>";
  return `<div class="code"><div class="code-head">${label}<button type="button" class="copy">Copy</button></div>` +
    `<pre><code>${escapeHtml(code)}</code></pre></div>`;
}

function renderMarkdown(source) {
  const lines = source.split("\n");
  const out = [];
  let paragraph = [];
  let list = null; // { tag: "ul" | "ol", items: [] }
  const flushParagraph = () => {
    if (paragraph.length) out.push(`<p>${paragraph.map(renderInline).join("<br>")}</p>`);
    paragraph = [];
  };
  const flushList = () => {
    if (list) out.push(`<${list.tag}>${list.items.map((i) => `<li>${renderInline(i)}</li>`).join("")}</${list.tag}>`);
    list = null;
  };
  const addItem = (tag, text) => {
    flushParagraph();
    if (!list || list.tag !== tag) {
      flushList();
      list = { tag, items: [] };
    }
    list.items.push(text);
  };

  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    let m;
    if ((m = line.match(/^\s*```\s*([\w+#.-]*)\s*$/))) {
      flushParagraph();
      flushList();
      const code = [];
      // A fence still open (the answer is streaming) runs to the end of the text.
      for (i++; i < lines.length && !/^\s*```\s*$/.test(lines[i]); i++) code.push(lines[i]);
      out.push(renderCodeBlock(m[1], code.join("\n")));
    } else if ((m = line.match(/^(#{1,6})\s+(.*)$/))) {
      flushParagraph();
      flushList();
      out.push(`<h${m[1].length}>${renderInline(m[2])}</h${m[1].length}>`);
    } else if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flushParagraph();
      flushList();
      out.push("<hr>");
    } else if ((m = line.match(/^\s*[-*+]\s+(.*)$/))) {
      addItem("ul", m[1]);
    } else if ((m = line.match(/^\s*\d+[.)]\s+(.*)$/))) {
      addItem("ol", m[1]);
    } else if ((m = line.match(/^>\s?(.*)$/))) {
      flushParagraph();
      flushList();
      out.push(`<blockquote>${renderInline(m[1])}</blockquote>`);
    } else if (line.trim() === "") {
      flushParagraph();
      flushList();
    } else {
      flushList();
      paragraph.push(line);
    }
  }
  flushParagraph();
  flushList();
  return out.join("");
}
