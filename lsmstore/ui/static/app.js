// The single page: log-in, the key's role, and the hash routes of every page.
import { ApiError, get, login, session, setUnauthorizedHandler } from "./api.js";
import { clear, clearStatus, h, say } from "./dom.js";
import { repositoriesPage } from "./repos.js";
import { objectPage, objectsPage } from "./objects.js";
import { changesPage } from "./changes.js";
import { commitPage, commitsPage } from "./commits.js";
import { comparePage } from "./compare.js";
import { branchesPage, tagsPage } from "./refs.js";
import { stagingPage } from "./staging.js";

const main = document.getElementById("main");
let me = null; // {access_key_id, role, repositories}
let cleanup = null;

const RANK = { reader: 0, writer: 1, admin: 2 };

function parse() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, qs] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, query: Object.fromEntries(new URLSearchParams(qs || "")) };
}

function context(parts, query) {
  const repo = parts[0] === "r" ? parts[1] : undefined;
  const sees = (r) => !me.repositories.length || me.repositories.includes(r);
  return {
    me,
    repo,
    parts,
    query,
    canWrite: (r = repo) => RANK[me.role] >= 1 && sees(r),
    canAdmin: () => me.role === "admin",
    go: (hash) => { if (location.hash === hash) route(); else location.hash = hash; },
    reload: () => route(),
  };
}

const PAGES = {
  objects: objectsPage,
  object: objectPage,
  changes: changesPage,
  commits: commitsPage,
  commit: commitPage,
  compare: comparePage,
  branches: branchesPage,
  tags: tagsPage,
  staging: stagingPage,
};

function shell() {
  const who = clear(document.getElementById("who"));
  const nav = clear(document.getElementById("topnav"));
  if (!me) return;
  nav.append(h("a", { href: "#/", "aria-current": location.hash.length <= 2 ? "page" : null }, "Repositories"));
  who.append(
    h("span", { class: "mono", title: "access key id" }, me.access_key_id),
    h("span", { class: "role", "aria-label": `role: ${me.role}` }, me.role),
    h("button", { type: "button", onclick: logout }, "Log out"));
}

function logout() {
  session.clear();
  me = null;
  location.hash = "#/login";
  route();
}

function loginPage() {
  shell();
  const form = h("form", { class: "login card", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title" }, "Log in to lsmstore"),
    h("p", { class: "muted" }, "Use an access key: ", h("code", {}, "lsmstore serve --init"),
      " prints the first admin key; ", h("code", {}, "lsmstore serve credentials create"), " makes more."),
    h("label", { for: "key" }, "Access key id"),
    h("input", { id: "key", name: "key", autocomplete: "username", required: true }),
    h("label", { for: "secret" }, "Secret access key"),
    h("input", { id: "secret", name: "secret", type: "password", autocomplete: "current-password", required: true }),
    h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, "Log in")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    try {
      await login(String(data.get("key")).trim(), String(data.get("secret")));
      me = null;
      clearStatus();
      location.hash = "#/";
      await route();
    } catch (e) {
      say(e.status === 401 ? "Wrong access key id or secret." : e.message, "error");
    }
  });
  clear(main).append(form);
  document.title = "Log in · lsmstore";
  form.querySelector("input").focus();
}

async function route() {
  if (cleanup) { cleanup(); cleanup = null; }
  const { parts, query } = parse();
  if (!session.get()) { me = null; loginPage(); return; }
  if (parts[0] === "login") { location.hash = "#/"; return; }
  try {
    if (!me) me = await get("/lsm/user");
    shell();
    const ctx = context(parts, query);
    clear(main).append(h("p", { class: "muted" }, "Loading…"));
    let page = repositoriesPage;
    if (parts[0] === "r" && parts[1]) page = PAGES[parts[2] || "objects"];
    if (!page) { clear(main).append(h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/" }, "Repositories"))); return; }
    const view = h("div", {});
    const done = await page(view, ctx);
    if (typeof done === "function") cleanup = done;
    clear(main).append(view);
    const heading = view.querySelector("h1");
    document.title = heading ? `${heading.textContent} · lsmstore` : "lsmstore";
    main.focus({ preventScroll: true });
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return;
    clear(main).append(h("h1", {}, "Could not load this page"), h("p", { class: "msg error", role: "alert" }, e.message));
  }
}

setUnauthorizedHandler(() => {
  session.clear();
  me = null;
  say("Your session ended: log in again.", "error");
  loginPage();
});

// The skip link moves the focus, not the hash (the hash is the page's address).
document.querySelector(".skip").addEventListener("click", (ev) => { ev.preventDefault(); main.focus(); });
window.addEventListener("hashchange", () => { clearStatus(); route(); });
route();
