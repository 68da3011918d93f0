// Commits: a ref's log with its merge graph; one commit with its parents, metadata and
// changes against its first parent; revert onto a branch.
import { all, enc, get, post, query } from "./api.js";
import { append, dialog, h, say, short, svg, table, when } from "./dom.js";
import { layout } from "./graph.js";
import { href, refPicker, repoHeader, repoPath } from "./layout.js";
import { defaultRef, refsOf } from "./objects.js";
import { changeRows } from "./changes.js";

const PAGE = 50;
const ROW = 52;
const LANE = 18;

function commitHref(repo, id) { return href(`${repoPath(repo, "commit")}/${enc(id)}`); }

function graphSvg(g, count) {
  const x = (lane) => 12 + lane * LANE;
  const y = (r) => r * ROW + ROW / 2;
  const bottom = count * ROW;
  const paths = g.edges.map((e) => {
    const x0 = x(e.fromLane); const y0 = y(e.from);
    const xl = x(e.lane);
    const y1 = e.to === null ? bottom : y(e.to);
    const x1 = e.to === null ? xl : x(e.toLane);
    const bend = ROW / 2;
    let d = `M${x0},${y0}`;
    d += xl === x0 ? ` L${xl},${y0 + bend}` : ` C${x0},${y0 + bend} ${xl},${y0} ${xl},${y0 + bend}`;
    if (e.to !== null && x1 !== xl) d += ` L${xl},${y1 - bend} C${xl},${y1} ${x1},${y1 - bend} ${x1},${y1}`;
    else d += ` L${x1},${y1}`;
    return svg("path", { d, fill: "none", stroke: `hsl(${(e.lane * 67) % 360} 55% 45%)`, "stroke-width": 2 });
  });
  const dots = g.nodes.map((n) => svg("circle", { cx: x(n.lane), cy: y(n.row), r: 5, fill: "#fff", stroke: `hsl(${(n.lane * 67) % 360} 55% 35%)`, "stroke-width": 2.5 }));
  return svg("svg", { width: x(g.width) + 6, height: bottom, "aria-hidden": "true", focusable: "false" }, ...paths, ...dots);
}

export async function commitsPage(view, ctx) {
  const repo = ctx.repo;
  const ref = await defaultRef(ctx);
  const after = ctx.query.after || "";
  const [{ branches, tags }, page] = await Promise.all([
    refsOf(repo),
    get(`/repositories/${enc(repo)}/refs/${enc(ref)}/commits${query({ amount: PAGE, after })}`),
  ]);
  const labels = new Map();
  for (const b of branches) labels.set(b.commit_id, [...(labels.get(b.commit_id) || []), b.id]);
  for (const t of tags) labels.set(t.commit_id, [...(labels.get(t.commit_id) || []), `tag: ${t.id}`]);
  const commits = page.results;
  const g = layout(commits);
  const pad = 12 + g.width * LANE + 10;
  const items = commits.map((c) => {
    const li = h("li", {},
      h("div", { class: "msgline" },
        h("a", { href: commitHref(repo, c.id) }, c.message || "(no message)"),
        (labels.get(c.id) || []).map((l) => h("span", { class: "badge ref" }, l)),
        c.parents.length > 1 ? h("span", { class: "badge ref" }, "merge") : null),
      h("div", { class: "muted" }, h("span", { class: "mono" }, short(c.id)), ` · ${c.committer} · ${when(c.creation_date)}`));
    li.style.paddingLeft = `${pad}px`;
    return li;
  });
  append(view,
    ...repoHeader({ ...ctx, query: { ref } }, "commits", `Commits of ${ref}`),
    h("div", { class: "row" }, refPicker("Ref", branches, tags, ref, (r) => ctx.go(href(repoPath(repo, "commits"), { ref: r })))),
    commits.length ? h("div", { class: "graphlog" }, graphSvg(g, commits.length), h("ol", { "aria-label": "Commits, newest first" }, items))
      : h("p", { class: "muted" }, "No commits."),
    h("div", { class: "row" },
      after ? h("a", { class: "button", href: href(repoPath(repo, "commits"), { ref }) }, "Newest") : null,
      page.pagination.has_more ? h("a", { class: "button", href: href(repoPath(repo, "commits"), { ref, after: page.pagination.next_offset }) }, "Older commits") : null));
}

export async function commitPage(view, ctx) {
  const repo = ctx.repo;
  const id = ctx.parts[3];
  const c = await get(`/repositories/${enc(repo)}/commits/${enc(id)}`);
  const parent = c.parents[0];
  let changes = [];
  let more = false;
  if (parent) {
    const page = await get(`/repositories/${enc(repo)}/refs/${enc(parent)}/diff/${enc(c.id)}${query({ type: "two_dot", amount: 500 })}`);
    changes = page.results;
    more = page.pagination.has_more;
  }
  const meta = Object.entries(c.metadata || {});
  const link = (d) => (d.type === "removed" ? d.path : h("a", { href: href(repoPath(repo, "object"), { ref: c.id, path: d.path }) }, d.path));
  append(view,
    ...repoHeader(ctx, "commits", c.message || "(no message)"),
    h("div", { class: "card" }, h("dl", { class: "props" },
      h("dt", {}, "Commit"), h("dd", { class: "mono" }, c.id),
      h("dt", {}, "Committer"), h("dd", {}, c.committer),
      h("dt", {}, "Date"), h("dd", {}, when(c.creation_date)),
      h("dt", {}, "Parents"), h("dd", {}, c.parents.length ? c.parents.map((p, i) => [i ? ", " : "", h("a", { class: "mono", href: commitHref(repo, p) }, short(p))]) : "none"),
      h("dt", {}, "Metarange"), h("dd", { class: "mono" }, c.meta_range_id),
      h("dt", {}, "Metadata"), h("dd", {}, meta.length ? h("dl", { class: "props" }, meta.map(([k, v]) => [h("dt", { class: "mono" }, k), h("dd", { class: "mono" }, v)])) : h("span", { class: "muted" }, "none")))),
    h("div", { class: "row" },
      h("a", { class: "button", href: href(repoPath(repo, "objects"), { ref: c.id }) }, "Browse objects at this commit"),
      ctx.canWrite() && parent ? h("button", { type: "button", class: "danger", onclick: () => revert(ctx, c) }, "Revert…") : null),
    h("h2", {}, parent ? `Changes against ${short(parent)}` : "First commit"),
    changes.length ? table(["Change", "Path", "Size"], changeRows(changes, link)) : h("p", { class: "muted" }, parent ? "No changes." : ""),
    more ? h("p", { class: "muted" }, "The first 500 changes are shown.") : null);
}

async function revert(ctx, c) {
  const branches = await all(`/repositories/${enc(ctx.repo)}/branches`);
  const id = "revert-branch";
  const parents = c.parents.length > 1;
  await dialog(`Revert ${short(c.id)}`, [
    h("p", {}, "A new commit on the branch undoes this commit's changes."),
    h("label", { for: id }, "Branch"),
    h("select", { id, name: "branch" }, branches.map((b) => h("option", { value: b.id }, b.id))),
    parents ? [h("label", { for: "revert-parent" }, "Parent (of a merge)"), h("select", { id: "revert-parent", name: "parent" }, c.parents.map((p, i) => h("option", { value: i + 1 }, `${i + 1}: ${short(p)}`)))] : null,
  ], {
    confirm: "Revert",
    danger: true,
    onSubmit: async (v) => {
      await post(`/repositories/${enc(ctx.repo)}/branches/${enc(v.branch)}/revert`, { ref: c.id, parent_number: Number(v.parent || 1) });
      say(`Reverted ${short(c.id)} on ${v.branch}.`);
      ctx.go(href(repoPath(ctx.repo, "commits"), { ref: v.branch }));
    },
  });
}
