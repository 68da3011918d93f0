// What every repository page shares: its address scheme (hash routes), heading and tabs.
import { h } from "./dom.js";

export function href(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return `#${path}${s ? `?${s}` : ""}`;
}

export const repoPath = (repo, page) => `/r/${encodeURIComponent(repo)}/${page}`;

// Each tab, and the query parameter that carries the current ref to it (none: the
// page picks its own).
const TABS = [
  ["objects", "Objects", "ref"],
  ["changes", "Uncommitted changes", "branch"],
  ["commits", "Commits", "ref"],
  ["compare", "Compare", null],
  ["branches", "Branches", null],
  ["tags", "Tags", null],
  ["staging", "Staging", "branch"],
];

export function repoHeader(ctx, active, title) {
  const ref = ctx.query.ref || ctx.query.branch;
  return [
    h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Repositories"), h("span", {}, "/"),
      h("a", { href: href(repoPath(ctx.repo, "objects")) }, ctx.repo)),
    h("nav", { class: "tabs", "aria-label": "Repository" },
      TABS.map(([page, text, param]) => h("a", {
        href: href(repoPath(ctx.repo, page), param && ref ? { [param]: ref } : {}),
        "aria-current": page === active ? "page" : null,
      }, text))),
    h("h1", {}, title),
  ];
}

// A select of the repository's branches (and tags, if given) that navigates on change.
export function refPicker(label, branches, tags, value, onChange) {
  const id = `ref-${Math.random().toString(36).slice(2, 8)}`;
  const sel = h("select", { id, onchange: (ev) => onChange(ev.target.value) },
    h("optgroup", { label: "Branches" }, branches.map((b) => h("option", { value: b.id, selected: b.id === value }, b.id))),
    tags && tags.length ? h("optgroup", { label: "Tags" }, tags.map((t) => h("option", { value: t.id, selected: t.id === value }, t.id))) : null);
  if (![...branches, ...(tags || [])].some((r) => r.id === value) && value) {
    sel.prepend(h("option", { value, selected: true }, value));
  }
  return h("span", {}, h("label", { class: "inline", for: id }, label), sel);
}
