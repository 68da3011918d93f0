// A branch's staging state (this service's own view): the L1 and L2 lengths, its last
// commit and compaction, and the write rate as a live chart.  Staging file ids start
// with their creation time in milliseconds (13 hex digits): new L1 ids are the
// acknowledged writes (one file per flush), the newest L2 id dates the last compaction.
import { enc, get } from "./api.js";
import { append, clear, h, short, svg, when } from "./dom.js";
import { href, refPicker, repoHeader, repoPath } from "./layout.js";
import { branchOf, refsOf } from "./objects.js";

const POLL_MS = 2000;
const WINDOW_S = 120;

const idTime = (id) => { const t = parseInt(id.slice(0, 13), 16); return Number.isFinite(t) ? t / 1000 : 0; };

function stat(label, value, extra) {
  return h("div", { class: "stat" }, h("div", { class: "muted" }, label), h("div", { class: "v" }, value), extra ? h("div", { class: "muted" }, extra) : null);
}

function chart(points, now) {
  const w = 640; const hgt = 160; const pad = 28;
  const max = Math.max(1, ...points.map((p) => p[1]));
  const x = (t) => pad + ((t - (now - WINDOW_S)) / WINDOW_S) * (w - pad - 8);
  const y = (v) => hgt - pad + 4 - (v / max) * (hgt - pad - 12);
  const line = points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  return svg("svg", { class: "chart", width: w, height: hgt, role: "img", "aria-label": `Write rate over the last ${WINDOW_S} seconds, at most ${max} flushes per second` },
    svg("line", { class: "axis", x1: pad, y1: y(0), x2: w - 8, y2: y(0) }),
    svg("line", { class: "axis", x1: pad, y1: 8, x2: pad, y2: y(0) }),
    svg("text", { x: 2, y: 14 }, String(max)),
    svg("text", { x: 2, y: y(0) }, "0"),
    svg("text", { x: pad, y: hgt - 4 }, `-${WINDOW_S}s`),
    svg("text", { x: w - 30, y: hgt - 4 }, "now"),
    svg("polyline", { points: line }));
}

export async function stagingPage(view, ctx) {
  const repo = ctx.repo;
  const { branches } = await refsOf(repo);
  const branch = await branchOf(ctx, branches);
  const seen = new Map(); // L1 id -> its time
  const box = h("div", { "aria-live": "off" });
  const url = `/lsm/repositories/${enc(repo)}/branches/${enc(branch)}/staging`;
  let timer = null;
  let stopped = false;
  const render = (s) => {
    const now = Date.now() / 1000;
    for (const id of s.l1) if (!seen.has(id)) seen.set(id, idTime(id));
    for (const [id, t] of seen) if (t < now - WINDOW_S) seen.delete(id);
    const buckets = new Array(WINDOW_S / 2).fill(0);
    for (const t of seen.values()) {
      const i = Math.floor((t - (now - WINDOW_S)) / 2);
      if (i >= 0 && i < buckets.length) buckets[i] += 0.5;
    }
    const points = buckets.map((v, i) => [now - WINDOW_S + i * 2 + 1, v]);
    const lastL2 = s.l2.length ? Math.max(...s.l2.map(idTime)) : 0;
    const recent = buckets.slice(-5).reduce((a, b) => a + b, 0) / 5;
    clear(box).append(
      h("div", { class: "stats" },
        stat("L1 files", s.l1_files, "flushed writes not yet compacted"),
        stat("L2 files", s.l2_files, "compacted, not yet committed"),
        stat("Last commit", s.last_commit_id ? short(s.last_commit_id) : "none", when(s.last_commit_date)),
        stat("Last compaction", lastL2 ? when(lastL2) : "none staged", "time of the newest L2 file"),
        stat("Write rate", `${recent.toFixed(1)}/s`, "L1 flushes per second, last 10 s")),
      h("h2", {}, "Write rate (L1 flushes per second)"),
      chart(points, now));
  };
  const poll = async () => {
    try {
      render(await get(url));
    } catch (e) {
      clear(box).append(h("p", { class: "msg error" }, e.message));
    }
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  };
  render(await get(url));
  timer = setTimeout(poll, POLL_MS);
  append(view,
    ...repoHeader({ ...ctx, query: { ref: branch } }, "staging", `Staging state of ${branch}`),
    h("div", { class: "row" }, refPicker("Branch", branches, null, branch, (b) => ctx.go(href(repoPath(repo, "staging"), { branch: b })))),
    box,
    h("p", { class: "muted" }, `Refreshed every ${POLL_MS / 1000} s while this page is open.`));
  return () => { stopped = true; clearTimeout(timer); };
}
