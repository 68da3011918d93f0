// Compare two refs (what the head ref changed since their merge base, by prefix) and
// merge the head into the base branch, with a strategy; conflicts are listed.
import { ApiError, all, enc, get, post, query } from "./api.js";
import { append, clear, dialog, h, say, select, short, table } from "./dom.js";
import { href, refPicker, repoHeader, repoPath } from "./layout.js";
import { defaultRef, refsOf } from "./objects.js";
import { changeRows } from "./changes.js";

const PAGE = 200;

export async function comparePage(view, ctx) {
  const repo = ctx.repo;
  const base = ctx.query.base || (await defaultRef(ctx));
  const { branches, tags } = await refsOf(repo);
  const head = ctx.query.head || (branches.find((b) => b.id !== base) || { id: base }).id;
  const prefix = ctx.query.prefix || "";
  const after = ctx.query.after || "";
  const nav = (p) => ctx.go(href(repoPath(repo, "compare"), { base, head, prefix, ...p }));
  const page = await get(`/repositories/${enc(repo)}/refs/${enc(base)}/diff/${enc(head)}${query({ type: "three_dot", amount: PAGE, after, prefix, delimiter: "/" })}`);
  const link = (d) => {
    if (d.path_type === "common_prefix") return h("a", { href: href(repoPath(repo, "compare"), { base, head, prefix: d.path }) }, d.path);
    return d.type === "removed" ? d.path : h("a", { href: href(repoPath(repo, "object"), { ref: head, path: d.path }) }, d.path);
  };
  const counts = {};
  for (const d of page.results) counts[d.type] = (counts[d.type] || 0) + 1;
  const baseIsBranch = branches.some((b) => b.id === base);
  const filter = h("form", { class: "row", role: "search" },
    h("label", { class: "inline", for: "cmp-prefix" }, "Prefix"),
    h("input", { id: "cmp-prefix", name: "prefix", value: prefix }),
    h("button", { type: "submit" }, "Filter"));
  filter.addEventListener("submit", (ev) => { ev.preventDefault(); nav({ prefix: new FormData(filter).get("prefix"), after: "" }); });
  const conflicts = h("section", { "aria-live": "polite", "aria-label": "Merge conflicts" });
  append(view,
    ...repoHeader(ctx, "compare", "Compare"),
    h("div", { class: "row" },
      refPicker("Base", branches, tags, base, (r) => nav({ base: r, after: "" })),
      h("span", {}, "←"),
      refPicker("Compared", branches, tags, head, (r) => nav({ head: r, after: "" })),
      h("span", { class: "spacer" }),
      baseIsBranch && ctx.canWrite() ? h("button", { type: "button", class: "primary", disabled: base === head, onclick: () => merge(ctx, head, base, conflicts) }, `Merge ${head} into ${base}`) : null),
    filter,
    h("p", { class: "muted" }, `Changes on ${head} since it and ${base} diverged`, prefix ? ` under ${prefix}` : "", ": ",
      Object.entries(counts).map(([k, n]) => h("span", { class: `badge ${k}` }, `${n} ${k.replace("_", " ")}`)), page.results.length ? "" : "none"),
    conflicts,
    page.results.length ? table(["Change", "Path", "Size"], changeRows(page.results, link)) : null,
    h("div", { class: "row" },
      after ? h("button", { type: "button", onclick: () => nav({ after: "" }) }, "First page") : null,
      page.pagination.has_more ? h("button", { type: "button", onclick: () => nav({ after: page.pagination.next_offset }) }, "Next page") : null));
}

async function merge(ctx, source, dest, conflictsBox) {
  const id = "merge-message";
  await dialog(`Merge ${source} into ${dest}`, [
    ...select("Strategy for conflicting changes", "strategy", [["", "none: stop on a conflict"], ["source-wins", `source wins (${source})`], ["dest-wins", `destination wins (${dest})`]], ""),
    h("label", { for: id }, "Message (optional)"),
    h("input", { id, name: "message", size: 48 }),
  ], {
    confirm: "Merge",
    onSubmit: async (v) => {
      try {
        const r = await post(`/repositories/${enc(ctx.repo)}/refs/${enc(source)}/merge/${enc(dest)}`, { message: v.message || undefined, strategy: v.strategy || undefined });
        say(`Merged ${source} into ${dest}: ${short(r.reference)}.`);
        ctx.go(href(repoPath(ctx.repo, "commits"), { ref: dest }));
      } catch (e) {
        if (e instanceof ApiError && e.status === 409) {
          showConflicts(ctx, source, dest, e.message, conflictsBox);
          return;
        }
        throw e;
      }
    },
  });
}

// The paths both sides changed since their merge base: where a merge without a
// strategy stops.
async function showConflicts(ctx, source, dest, message, box) {
  clear(box).append(h("div", { class: "msg error", role: "alert" }, `Merge stopped: ${message}`));
  try {
    const mb = await get(`/repositories/${enc(ctx.repo)}/refs/${enc(source)}/merge/${enc(dest)}`);
    const side = (ref) => all(`/repositories/${enc(ctx.repo)}/refs/${enc(mb.base_commit_id)}/diff/${enc(ref)}`, { type: "two_dot" }, 2000);
    const [ours, theirs] = await Promise.all([side(mb.destination_commit_id), side(mb.source_commit_id)]);
    const changed = new Map(ours.map((d) => [d.path, d.type]));
    const both = theirs.filter((d) => changed.has(d.path));
    box.append(h("h2", {}, `Changed on both sides (${both.length})`),
      table(["Path", `On ${dest}`, `On ${source}`], both.map((d) => h("tr", {},
        h("td", { class: "mono" }, d.path),
        h("td", {}, h("span", { class: `badge ${changed.get(d.path)}` }, changed.get(d.path))),
        h("td", {}, h("span", { class: `badge ${d.type}` }, d.type))))),
      h("p", { class: "muted" }, "Paths changed on both sides since the merge base (the conflicts are among them). Merge again with a strategy to resolve them, or change one side."));
  } catch (e) {
    box.append(h("p", { class: "muted" }, `The conflicting paths could not be listed: ${e.message}`));
  }
}
