// Building the page's DOM without ever parsing HTML: every text an agent,
// a file or the host wrote goes in as a text node (textContent), never as
// markup. There is no innerHTML anywhere in the console.

// el("div", {class: "x", onclick: fn, title: "t"}, child, "text", ...)
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (key === "value") node.value = value;
    else if (key === "checked") node.checked = !!value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export function replace(node, ...children) {
  clear(node);
  return append(node, children);
}

// The last path segment of a file: URI, decoded, for people to read.
export function shortPath(uri) {
  if (!uri) return "";
  try {
    const path = decodeURIComponent(new URL(uri).pathname);
    return path || uri;
  } catch {
    return uri;
  }
}

// Words for a SessionStatus number (low bits: activity; 32 read; 64 archived).
export function statusWord(status) {
  if (status & 64) return "archived";
  if ((status & 24) === 24) return "input needed";
  if (status & 8) return "in progress";
  if (status & 2) return "error";
  return "idle";
}
