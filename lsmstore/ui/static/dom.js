// Building the page: elements made from data (text is always set as text, never
// parsed as HTML), dialogs, status messages, formatting.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

export function append(el, ...children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

const SVG_NS = "http://www.w3.org/2000/svg";
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  append(el, children);
  return el;
}

export function clear(el) { while (el.firstChild) el.firstChild.remove(); return el; }

// A message in the status region; it stays until the next page (a message that
// vanishes on a timer may be gone before it is read).
export function say(text, kind = "info") {
  const box = document.getElementById("status");
  clear(box).append(h("div", { class: `msg ${kind}` }, text));
}

export function clearStatus() { clear(document.getElementById("status")); }

// A modal dialog (the native <dialog>: focus is trapped and Escape closes it).  `body`
// is a list of nodes; the promise resolves with the form's values on confirm, or null.
export function dialog(title, body, { confirm = "OK", danger = false, onSubmit } = {}) {
  return new Promise((resolve) => {
    const error = h("div", { class: "msg error", role: "alert", hidden: true });
    const form = h("form", { method: "dialog" },
      h("h2", { id: "dlg-title" }, title), body, error,
      h("div", { class: "actions" },
        h("button", { type: "button", value: "cancel", onclick: () => dlg.close("cancel") }, "Cancel"),
        h("button", { type: "submit", value: "ok", class: danger ? "danger" : "primary" }, confirm)));
    const dlg = h("dialog", { "aria-labelledby": "dlg-title" }, form);
    let done = false;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const values = Object.fromEntries(new FormData(form).entries());
      if (onSubmit) {
        const buttons = form.querySelectorAll("button");
        buttons.forEach((b) => { b.disabled = true; });
        try {
          await onSubmit(values, form);
        } catch (e) {
          error.hidden = false;
          error.textContent = e.message || String(e);
          buttons.forEach((b) => { b.disabled = false; });
          return;
        }
      }
      done = true;
      dlg.close("ok");
      resolve(values);
    });
    dlg.addEventListener("close", () => { dlg.remove(); if (!done) resolve(null); });
    document.body.append(dlg);
    dlg.showModal();
    const first = form.querySelector("input, select, textarea");
    if (first) first.focus();
  });
}

export function field(label, attrs = {}) {
  const id = attrs.id || `f-${attrs.name}-${Math.random().toString(36).slice(2, 8)}`;
  return [h("label", { for: id }, label), h("input", { id, ...attrs })];
}

export function select(label, name, options, value) {
  const id = `s-${name}-${Math.random().toString(36).slice(2, 8)}`;
  const sel = h("select", { id, name },
    options.map(([v, text]) => h("option", { value: v, selected: v === value }, text)));
  return [h("label", { for: id }, label), sel];
}

export function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

export function when(seconds) {
  if (!seconds) return "";
  return new Date(seconds * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

export function short(id) { return id ? id.slice(0, 12) : ""; }

export function table(headers, rows, { caption } = {}) {
  return h("table", {},
    caption ? h("caption", { class: "muted" }, caption) : null,
    h("thead", {}, h("tr", {}, headers.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows));
}
