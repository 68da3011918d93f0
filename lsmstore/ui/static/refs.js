// Branches and tags: list, create from a ref, delete.
import { del, enc, get, post, query } from "./api.js";
import { append, dialog, field, h, say, short, table } from "./dom.js";
import { href, repoHeader, repoPath } from "./layout.js";

const PAGE = 100;

async function listPage(view, ctx, kind) {
  const repo = ctx.repo;
  const after = ctx.query.after || "";
  const prefix = ctx.query.prefix || "";
  const [info, page] = await Promise.all([
    get(`/repositories/${enc(repo)}`),
    get(`/repositories/${enc(repo)}/${kind}${query({ amount: PAGE, after, prefix })}`),
  ]);
  const writable = ctx.canWrite();
  const isBranch = kind === "branches";
  const rows = page.results.map((r) => h("tr", {},
    h("td", {}, h("a", { href: href(repoPath(repo, "objects"), { ref: r.id }) }, r.id),
      r.id === info.default_branch && isBranch ? h("span", { class: "badge ref" }, "default") : null),
    h("td", {}, h("a", { class: "mono", href: href(`${repoPath(repo, "commit")}/${enc(r.commit_id)}`) }, short(r.commit_id))),
    isBranch ? h("td", {}, h("a", { href: href(repoPath(repo, "changes"), { branch: r.id }) }, "changes"), " · ",
      h("a", { href: href(repoPath(repo, "commits"), { ref: r.id }) }, "log"), " · ",
      r.id !== info.default_branch ? [h("a", { href: href(repoPath(repo, "compare"), { base: info.default_branch, head: r.id }) }, "compare"), " · "] : null,
      h("a", { href: href(repoPath(repo, "staging"), { branch: r.id }) }, "staging")) : null,
    // Branch protection rules are not part of this server: the column is where they
    // will show.
    isBranch ? h("td", { class: "muted" }, "—") : null,
    writable ? h("td", {}, r.id === info.default_branch && isBranch ? null
      : h("button", { type: "button", class: "danger", "aria-label": `Delete ${isBranch ? "branch" : "tag"} ${r.id}`, onclick: () => remove(ctx, kind, r.id) }, "Delete")) : null));
  const what = isBranch ? "branch" : "tag";
  append(view,
    ...repoHeader(ctx, kind, isBranch ? "Branches" : "Tags"),
    h("div", { class: "row" }, h("span", { class: "spacer" }),
      writable ? h("button", { type: "button", class: "primary", onclick: () => create(ctx, kind, info.default_branch) }, `Create ${what}`) : null),
    rows.length ? table(["Name", "Commit", ...(isBranch ? ["Pages", "Protection"] : []), ...(writable ? [""] : [])], rows)
      : h("p", { class: "muted" }, `No ${kind}.`),
    h("div", { class: "row" },
      after ? h("a", { class: "button", href: href(repoPath(repo, kind)) }, "First page") : null,
      page.pagination.has_more ? h("a", { class: "button", href: href(repoPath(repo, kind), { after: page.pagination.next_offset }) }, "Next page") : null),
    isBranch ? h("section", { class: "card placeholder", "aria-labelledby": "hooks-title" },
      h("h2", { id: "hooks-title" }, "Protection rules and hook runs"),
      h("p", {}, "This server has no branch protection rules or hooks yet; when it has, they are listed here.")) : null);
}

async function create(ctx, kind, defaultBranch) {
  const isBranch = kind === "branches";
  await dialog(`Create ${isBranch ? "branch" : "tag"}`, [
    ...field("Name", { name: "name", required: true }),
    ...field("From ref (branch, tag or commit)", { name: "source", required: true, value: ctx.query.ref || defaultBranch }),
  ], {
    confirm: "Create",
    onSubmit: async (v) => {
      const body = isBranch ? { name: v.name, source: v.source } : { id: v.name, ref: v.source };
      await post(`/repositories/${enc(ctx.repo)}/${kind}`, body);
      say(`${isBranch ? "Branch" : "Tag"} ${v.name} created from ${v.source}.`);
      ctx.reload();
    },
  });
}

async function remove(ctx, kind, name) {
  const what = kind === "branches" ? "branch" : "tag";
  await dialog(`Delete ${what} ${name}?`, [h("p", {}, kind === "branches"
    ? "The branch and its uncommitted changes are deleted; its commits stay reachable from other refs."
    : "The tag is deleted; its commit stays.")], {
    confirm: "Delete",
    danger: true,
    onSubmit: async () => {
      await del(`/repositories/${enc(ctx.repo)}/${kind}/${enc(name)}`);
      say(`${what} ${name} deleted.`);
      ctx.reload();
    },
  });
}

export const branchesPage = (view, ctx) => listPage(view, ctx, "branches");
export const tagsPage = (view, ctx) => listPage(view, ctx, "tags");
