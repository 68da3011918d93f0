// The commit graph of a log page: each commit gets a lane (column); an edge runs from
// a commit down the lane it was given to its parent.  Commits come newest first (the
// log's order: every child before its parents).

export function layout(commits) {
  const row = new Map(commits.map((c, i) => [c.id, i]));
  const lanes = []; // lane -> the commit id it waits for (null: free)
  const nodes = [];
  const edges = []; // {from: row, to: row|null, lane, fromLane, toLane}
  const waiting = new Map(); // commit id -> [{from, lane, fromLane}]
  const free = () => { const i = lanes.indexOf(null); return i >= 0 ? i : lanes.push(null) - 1; };
  commits.forEach((c, i) => {
    let col = lanes.indexOf(c.id);
    if (col < 0) col = free();
    for (let l = 0; l < lanes.length; l++) if (lanes[l] === c.id) lanes[l] = null;
    nodes.push({ id: c.id, row: i, lane: col });
    for (const e of waiting.get(c.id) || []) edges.push({ ...e, to: i, toLane: col });
    waiting.delete(c.id);
    (c.parents || []).forEach((p, n) => {
      let lane;
      if (n === 0 && !lanes.includes(p)) lane = col;
      else if (lanes.includes(p)) lane = lanes.indexOf(p);
      else lane = free();
      lanes[lane] = p;
      const e = { from: i, fromLane: col, lane };
      if (row.has(p)) waiting.set(p, [...(waiting.get(p) || []), e]);
      else edges.push({ ...e, to: null, toLane: lane });
    });
  });
  const width = Math.max(1, ...nodes.map((n) => n.lane + 1), ...edges.map((e) => e.lane + 1));
  return { nodes, edges, width };
}
