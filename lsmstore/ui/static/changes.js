// A branch's uncommitted changes; commit them (message, metadata) or reset them.
import { enc, get, post, put, query } from "./api.js";
import { append, bytes, dialog, h, say, table } from "./dom.js";
import { href, refPicker, repoHeader, repoPath } from "./layout.js";
import { branchOf, refsOf } from "./objects.js";

const PAGE = 200;

export function changeRows(changes, link, action) {
  return changes.map((d) => h("tr", { class: d.type },
    h("td", {}, h("span", { class: `badge ${d.type}` }, d.type.replace("_", " "))),
    h("td", { class: "mono" }, link ? link(d) : d.path),
    h("td", { class: "num" }, d.size_bytes !== undefined ? bytes(d.size_bytes) : ""),
    action ? h("td", {}, action(d)) : null));
}

export function metadataEditor() {
  const rows = h("div", {});
  const add = (k = "", v = "") => {
    const n = rows.children.length;
    rows.append(h("div", { class: "metarow" },
      h("input", { name: `mk${n}`, "aria-label": `Metadata key ${n + 1}`, placeholder: "key", value: k }),
      h("input", { name: `mv${n}`, "aria-label": `Metadata value ${n + 1}`, placeholder: "value", value: v })));
  };
  add();
  return [h("fieldset", {}, h("legend", {}, "Metadata"), rows,
    h("button", { type: "button", onclick: () => add() }, "Add a metadata entry"))];
}

export function metadataOf(values) {
  const out = {};
  for (const [k, v] of Object.entries(values)) {
    if (k.startsWith("mk") && v) out[v] = values[`mv${k.slice(2)}`] || "";
  }
  return out;
}

export async function changesPage(view, ctx) {
  const repo = ctx.repo;
  const { branches } = await refsOf(repo);
  const branch = await branchOf(ctx, branches);
  const after = ctx.query.after || "";
  const prefix = ctx.query.prefix || "";
  const page = await get(`/repositories/${enc(repo)}/branches/${enc(branch)}/diff${query({ amount: PAGE, after, prefix })}`);
  const writable = ctx.canWrite();
  const link = (d) => (d.type === "removed" ? d.path : h("a", { href: href(repoPath(repo, "object"), { ref: branch, path: d.path }) }, d.path));
  append(view,
    ...repoHeader({ ...ctx, query: { ref: branch } }, "changes", `Uncommitted changes on ${branch}`),
    h("div", { class: "row" },
      refPicker("Branch", branches, null, branch, (b) => ctx.go(href(repoPath(repo, "changes"), { branch: b }))),
      h("span", { class: "spacer" }),
      writable ? h("button", { type: "button", class: "primary", disabled: !page.results.length, onclick: () => commit(ctx, branch) }, "Commit changes") : null,
      writable ? h("button", { type: "button", class: "danger", disabled: !page.results.length, onclick: () => reset(ctx, branch) }, "Reset branch") : null),
    page.results.length ? table(["Change", "Path", "Size", ...(writable ? [""] : [])], changeRows(page.results, link, writable ? (d) => h("button", {
      type: "button", "aria-label": `Discard the change of ${d.path}`, onclick: () => discard(ctx, branch, d.path),
    }, "Discard") : null))
      : h("p", { class: "muted" }, "No uncommitted changes."),
    h("div", { class: "row" },
      after ? h("a", { class: "button", href: href(repoPath(repo, "changes"), { branch, prefix }) }, "First page") : null,
      page.pagination.has_more ? h("a", { class: "button", href: href(repoPath(repo, "changes"), { branch, prefix, after: page.pagination.next_offset }) }, "Next page") : null));
}

async function commit(ctx, branch) {
  const id = "commit-message";
  await dialog(`Commit changes to ${branch}`, [
    h("label", { for: id }, "Message"),
    h("textarea", { id, name: "message", rows: 3, cols: 48, required: true }),
    ...metadataEditor(),
  ], {
    confirm: "Commit",
    onSubmit: async (v) => {
      const c = await post(`/repositories/${enc(ctx.repo)}/branches/${enc(branch)}/commits`, { message: v.message, metadata: metadataOf(v) });
      say(`Committed ${c.id.slice(0, 12)}.`);
      ctx.go(href(repoPath(ctx.repo, "commit") + `/${enc(c.id)}`));
    },
  });
}

async function discard(ctx, branch, path) {
  try {
    await put(`/repositories/${enc(ctx.repo)}/branches/${enc(branch)}`, { type: "object", path });
    say(`The change of ${path} was discarded.`);
    ctx.reload();
  } catch (e) {
    say(e.message, "error");
  }
}

async function reset(ctx, branch) {
  await dialog(`Reset ${branch}?`, [h("p", {}, "Every uncommitted change of this branch is discarded. This cannot be undone.")], {
    confirm: "Discard changes",
    danger: true,
    onSubmit: async () => {
      await put(`/repositories/${enc(ctx.repo)}/branches/${enc(branch)}`, { type: "reset" });
      say(`The uncommitted changes of ${branch} were discarded.`);
      ctx.reload();
    },
  });
}
