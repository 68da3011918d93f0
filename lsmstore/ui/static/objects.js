// Objects: browse a ref by prefix (one page of the API's listing at a time), an
// object's details, preview, download and delete; upload to a branch.
import { all, del, download, enc, get, objectBlob, query, upload } from "./api.js";
import { append, bytes, clear, dialog, h, say, table, when } from "./dom.js";
import { href, refPicker, repoHeader, repoPath } from "./layout.js";

const PAGE = 100;

export async function refsOf(repo) {
  const [branches, tags] = await Promise.all([
    all(`/repositories/${enc(repo)}/branches`),
    all(`/repositories/${enc(repo)}/tags`),
  ]);
  return { branches, tags };
}

export async function defaultRef(ctx) {
  if (ctx.query.ref) return ctx.query.ref;
  const r = await get(`/repositories/${enc(ctx.repo)}`);
  return r.default_branch;
}

// The branch a branch-only page shows: the one asked for, or the default branch when
// none is asked for or the ref asked for is not a branch (a tag, a commit).
export async function branchOf(ctx, branches) {
  const asked = ctx.query.branch;
  if (asked && branches.some((b) => b.id === asked)) return asked;
  return (await get(`/repositories/${enc(ctx.repo)}`)).default_branch;
}

function crumbs(ctx, ref, prefix) {
  const parts = prefix.split("/").filter(Boolean);
  const out = [h("a", { href: href(repoPath(ctx.repo, "objects"), { ref }) }, "(root)")];
  let acc = "";
  for (const p of parts) {
    acc += `${p}/`;
    out.push(h("span", {}, " / "), h("a", { href: href(repoPath(ctx.repo, "objects"), { ref, prefix: acc }) }, p));
  }
  return h("nav", { class: "crumbs", "aria-label": "Prefix" }, out);
}

export async function objectsPage(view, ctx) {
  const ref = await defaultRef(ctx);
  const prefix = ctx.query.prefix || "";
  const after = ctx.query.after || "";
  const repo = ctx.repo;
  const [{ branches, tags }, page] = await Promise.all([
    refsOf(repo),
    get(`/repositories/${enc(repo)}/refs/${enc(ref)}/objects/ls${query({ prefix, after, delimiter: "/", amount: PAGE, user_metadata: false })}`),
  ]);
  const isBranch = branches.some((b) => b.id === ref);
  const writable = isBranch && ctx.canWrite();
  const rows = page.results.map((o) => {
    const name = o.path.slice(prefix.length);
    if (o.path_type === "common_prefix") {
      return h("tr", {}, h("td", {}, h("a", { href: href(repoPath(repo, "objects"), { ref, prefix: o.path }) }, `📁 ${name}`)),
        h("td", {}), h("td", {}), h("td", {}), writable ? h("td", {}) : null);
    }
    return h("tr", {},
      h("td", {}, h("a", { href: href(repoPath(repo, "object"), { ref, path: o.path }) }, name)),
      h("td", { class: "num" }, bytes(o.size_bytes)),
      h("td", {}, o.content_type || ""),
      h("td", {}, when(o.mtime)),
      writable ? h("td", {}, h("button", { type: "button", class: "danger", "aria-label": `Delete ${o.path}`, onclick: () => removeObject(ctx, ref, o.path) }, "Delete")) : null);
  });
  append(view,
    ...repoHeader({ ...ctx, query: { ref } }, "objects", "Objects"),
    h("div", { class: "row" },
      refPicker("Ref", branches, tags, ref, (r) => ctx.go(href(repoPath(repo, "objects"), { ref: r, prefix }))),
      h("span", { class: "spacer" }),
      isBranch && !ctx.canWrite() ? h("span", { class: "muted" }, "Read-only key") : null,
      !isBranch ? h("span", { class: "muted" }, "Not a branch: read-only") : null),
    crumbs(ctx, ref, prefix),
    writable ? uploader(ctx, ref, prefix) : null,
    rows.length ? table(["Name", "Size", "Content type", "Modified", ...(writable ? [""] : [])], rows, { caption: `${page.results.length} ${page.results.length === 1 ? "entry" : "entries"} on this page` })
      : h("p", { class: "muted" }, "No objects under this prefix."),
    h("div", { class: "row" },
      after ? h("a", { class: "button", href: href(repoPath(repo, "objects"), { ref, prefix }) }, "First page") : null,
      page.pagination.has_more ? h("a", { class: "button", href: href(repoPath(repo, "objects"), { ref, prefix, after: page.pagination.next_offset }) }, "Next page") : null));
}

function uploader(ctx, branch, prefix) {
  const list = h("ul", { "aria-label": "Uploads" });
  const input = h("input", { type: "file", id: "upload-input", multiple: true });
  const zone = h("div", { class: "drop" },
    h("p", {}, `Drop files here to upload them to ${branch}:${prefix || "/"} — or `),
    h("label", { for: "upload-input", class: "inline" }, "choose files: "), input, list);
  const start = async (files) => {
    if (!files.length) return;
    let failed = 0;
    await Promise.all([...files].map(async (file) => {
      const bar = h("progress", { max: 1, value: 0, "aria-label": `Upload of ${file.name}` });
      const state = h("span", {}, "");
      list.append(h("li", {}, `${prefix}${file.name} `, bar, " ", state));
      try {
        await upload(ctx.repo, branch, prefix + file.name, file, (f) => { bar.value = f; });
        state.textContent = "done";
      } catch (e) {
        failed += 1;
        state.textContent = `failed: ${e.message}`;
      }
    }));
    if (failed) say(`${failed} upload(s) failed.`, "error");
    else { say(`${files.length} file(s) uploaded.`); ctx.reload(); }
  };
  input.addEventListener("change", () => start(input.files));
  zone.addEventListener("dragover", (ev) => { ev.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (ev) => { ev.preventDefault(); zone.classList.remove("over"); start(ev.dataTransfer.files); });
  return zone;
}

async function removeObject(ctx, branch, path, after) {
  await dialog(`Delete ${path}?`, [h("p", {}, `The object is deleted from branch ${branch} (an uncommitted change until the next commit).`)], {
    confirm: "Delete",
    danger: true,
    onSubmit: async () => {
      await del(`/repositories/${enc(ctx.repo)}/branches/${enc(branch)}/objects${query({ path })}`);
      say(`${path} deleted.`);
      if (after) after(); else ctx.reload();
    },
  });
}

export async function objectPage(view, ctx) {
  const ref = await defaultRef(ctx);
  const path = ctx.query.path || "";
  const repo = ctx.repo;
  const base = `/repositories/${enc(repo)}/refs/${enc(ref)}/objects`;
  const [stat, { branches }] = await Promise.all([get(`${base}/stat${query({ path })}`), refsOf(repo)]);
  const isBranch = branches.some((b) => b.id === ref);
  const dir = path.includes("/") ? path.slice(0, path.lastIndexOf("/") + 1) : "";
  const meta = Object.entries(stat.metadata || {});
  const preview = h("div", { class: "card", "aria-live": "polite" }, h("p", { class: "muted" }, "Loading preview…"));
  append(view,
    ...repoHeader({ ...ctx, query: { ref } }, "objects", path.split("/").pop()),
    crumbs(ctx, ref, dir),
    h("div", { class: "card" }, h("dl", { class: "props" },
      h("dt", {}, "Path"), h("dd", { class: "mono" }, stat.path),
      h("dt", {}, "Ref"), h("dd", {}, ref),
      h("dt", {}, "Size"), h("dd", {}, `${bytes(stat.size_bytes)} (${stat.size_bytes} bytes)`),
      h("dt", {}, "Content type"), h("dd", {}, stat.content_type),
      h("dt", {}, "ETag"), h("dd", { class: "mono" }, stat.checksum),
      h("dt", {}, "Modified"), h("dd", {}, when(stat.mtime)),
      h("dt", {}, "Physical address"), h("dd", { class: "mono" }, stat.physical_address),
      h("dt", {}, "Metadata"), h("dd", {}, meta.length ? h("dl", { class: "props" }, meta.map(([k, v]) => [h("dt", { class: "mono" }, k), h("dd", { class: "mono" }, v)])) : h("span", { class: "muted" }, "none"))),
    h("div", { class: "row" },
      h("button", { type: "button", class: "primary", onclick: () => download(repo, ref, path).catch((e) => say(e.message, "error")) }, "Download"),
      isBranch && ctx.canWrite() ? h("button", { type: "button", class: "danger", onclick: () => removeObject(ctx, ref, path, () => ctx.go(href(repoPath(repo, "objects"), { ref, prefix: dir }))) }, "Delete") : null)),
    h("h2", {}, "Preview"), preview);
  const shown = IMAGE_TYPES.includes(stat.content_type) && stat.size_bytes <= IMAGE_BYTES
    ? objectBlob(repo, ref, path).then((blob) => {
      const url = URL.createObjectURL(blob);
      const img = h("img", { class: "preview", src: url, alt: `Image ${path}` });
      img.addEventListener("load", () => URL.revokeObjectURL(url));
      return [img];
    })
    : get(`/lsm/repositories/${enc(repo)}/refs/${enc(ref)}/preview${query({ path, rows: 50 })}`).then(renderPreview);
  shown
    .then((nodes) => append(clear(preview), nodes))
    .catch((e) => clear(preview).append(h("p", { class: "msg error" }, `No preview: ${e.message}`)));
}

// Images are shown from their bytes (fetched with the token) up to this size.
const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
const IMAGE_BYTES = 8 * 1024 * 1024;

function renderPreview(p) {
  if (p.format === "binary") return [h("p", { class: "muted" }, "No preview for this type of object: download it.")];
  if (p.format === "text") {
    return [h("pre", { class: "preview", tabindex: 0, "aria-label": "Text preview" }, p.text),
      p.truncated ? h("p", { class: "muted" }, "The first 64 KiB are shown.") : null];
  }
  const out = [];
  if (p.format === "parquet") {
    out.push(h("p", {}, `Parquet: ${p.total_rows} rows in ${p.row_groups} row group(s). Schema: `,
      h("span", { class: "mono" }, p.schema.join(", "))));
  }
  out.push(h("div", { class: "tablewrap", tabindex: 0, role: "region", "aria-label": "First rows" },
    table(p.columns, p.rows.map((r) => h("tr", {}, r.map((v) => h("td", { class: typeof v === "number" ? "num mono" : "mono" }, v === null ? "null" : String(v))))),
      { caption: `${p.format.toUpperCase()}: first ${p.rows.length} row(s)` })));
  if (p.truncated) out.push(h("p", { class: "muted" }, "More rows follow."));
  return out;
}
