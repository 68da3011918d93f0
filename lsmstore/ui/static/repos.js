// Repositories: list (paged), create (admin keys; the API's namespace rules), delete.
import { del, enc, get, post, query } from "./api.js";
import { append, dialog, field, h, say, table, when } from "./dom.js";
import { href, repoPath } from "./layout.js";

const PAGE = 100;

export async function repositoriesPage(view, ctx) {
  const after = ctx.query.after || "";
  const prefix = ctx.query.prefix || "";
  const page = await get(`/repositories${query({ amount: PAGE, after, prefix })}`);
  const rows = page.results.map((r) => h("tr", {},
    h("td", {}, h("a", { href: href(repoPath(r.id, "objects"), { ref: r.default_branch }) }, r.id)),
    h("td", { class: "mono" }, r.storage_namespace),
    h("td", {}, r.default_branch),
    h("td", {}, when(r.creation_date)),
    ctx.canAdmin() ? h("td", {}, h("button", { type: "button", class: "danger", "aria-label": `Delete repository ${r.id}`, onclick: () => remove(ctx, r.id) }, "Delete")) : null));
  const search = h("form", { class: "row", role: "search" },
    h("label", { class: "inline", for: "repo-prefix" }, "Name starts with"),
    h("input", { id: "repo-prefix", name: "prefix", value: prefix }),
    h("button", { type: "submit" }, "Filter"));
  search.addEventListener("submit", (ev) => {
    ev.preventDefault();
    ctx.go(href("/", { prefix: new FormData(search).get("prefix") }));
  });
  append(view,
    h("div", { class: "row" }, h("h1", {}, "Repositories"), h("span", { class: "spacer" }),
      ctx.canAdmin() ? h("button", { type: "button", class: "primary", onclick: () => create(ctx) }, "Create repository") : null),
    search,
    rows.length ? table(["Name", "Storage namespace", "Default branch", "Created", ...(ctx.canAdmin() ? [""] : [])], rows)
      : h("p", { class: "muted" }, prefix ? "No repository matches." : "No repositories yet."),
    h("div", { class: "row" },
      after ? h("a", { class: "button", href: href("/", { prefix }) }, "First page") : null,
      page.pagination.has_more ? h("a", { class: "button", href: href("/", { prefix, after: page.pagination.next_offset }) }, "Next page") : null));
}

async function create(ctx) {
  await dialog("Create repository", [
    ...field("Name", { name: "name", required: true, pattern: "[a-z0-9][a-z0-9_\\-]{0,62}", title: "up to 63 lower-case letters, digits, _ and -, starting with a letter or digit" }),
    ...field("Storage namespace", { name: "storage_namespace", required: true, placeholder: "local://my-repo, s3://bucket/prefix or mem://scratch" }),
    h("p", { class: "muted" }, "The API accepts local://, s3:// and mem:// namespaces."),
    ...field("Default branch", { name: "default_branch", value: "main", required: true }),
  ], {
    confirm: "Create",
    onSubmit: async (v) => {
      await post("/repositories", { name: v.name, storage_namespace: v.storage_namespace, default_branch: v.default_branch });
      say(`Repository ${v.name} created.`);
      ctx.go(href(repoPath(v.name, "objects"), { ref: v.default_branch }));
    },
  });
}

async function remove(ctx, name) {
  await dialog(`Delete repository ${name}?`, [
    h("p", {}, "Its branches, tags and commits are deleted. Type the repository's name to confirm."),
    ...field("Repository name", { name: "confirm", required: true, autocomplete: "off" }),
  ], {
    confirm: "Delete",
    danger: true,
    onSubmit: async (v) => {
      if (v.confirm !== name) throw new Error("The name does not match.");
      await del(`/repositories/${enc(name)}`);
      say(`Repository ${name} deleted.`);
      ctx.reload();
    },
  });
}
