// The REST API, called with the logged-in key's token (kept in sessionStorage: it ends
// with the tab or at its expiry).  Every call goes through the same routes and
// permissions as any other client.

const KEY = "lsmstore.session";

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export const session = {
  get() {
    try {
      const s = JSON.parse(sessionStorage.getItem(KEY) || "null");
      if (s && s.exp * 1000 > Date.now()) return s;
    } catch { /* a damaged entry is no session */ }
    return null;
  },
  set(s) { sessionStorage.setItem(KEY, JSON.stringify(s)); },
  clear() { sessionStorage.removeItem(KEY); },
};

export const enc = encodeURIComponent;

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) { onUnauthorized = fn; }

function authHeader() {
  const s = session.get();
  return s ? { Authorization: `Bearer ${s.token}` } : {};
}

async function failure(res) {
  let body = null;
  let message = `${res.status} ${res.statusText}`;
  try {
    body = await res.json();
    if (body && body.message) message = body.message;
  } catch { /* not JSON */ }
  if (res.status === 401) onUnauthorized();
  return new ApiError(res.status, message, body);
}

export async function call(method, path, { body, headers = {}, raw = false } = {}) {
  const init = { method, headers: { ...authHeader(), ...headers } };
  if (body !== undefined) {
    init.body = typeof body === "string" || body instanceof Blob ? body : JSON.stringify(body);
    if (!(body instanceof Blob) && !init.headers["Content-Type"]) {
      init.headers["Content-Type"] = "application/json";
    }
  }
  const res = await fetch(`/api/v1${path}`, init);
  if (!res.ok) throw await failure(res);
  if (raw) return res;
  if (res.status === 204) return null;
  const text = await res.text();
  if (!text) return null;
  return (res.headers.get("Content-Type") || "").includes("json") ? JSON.parse(text) : text;
}

export const get = (path) => call("GET", path);
export const post = (path, body) => call("POST", path, { body: body === undefined ? {} : body });
export const put = (path, body) => call("PUT", path, { body });
export const del = (path) => call("DELETE", path);

export async function login(accessKeyId, secret) {
  const res = await fetch("/api/v1/auth/login", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ access_key_id: accessKeyId, secret_access_key: secret }),
  });
  if (!res.ok) throw await failure(res);
  const doc = await res.json();
  session.set({ token: doc.token, exp: doc.token_expiration, key: accessKeyId });
  return doc;
}

// Every page of a lakeFS list route (up to `max` items).
export async function all(path, params = {}, max = 5000) {
  const out = [];
  let after = "";
  for (;;) {
    const page = await get(path + query({ ...params, after, amount: 1000 }));
    out.push(...page.results);
    if (!page.pagination.has_more || out.length >= max) return out;
    after = page.pagination.next_offset;
  }
}

// Upload one file with progress (fetch has no upload progress: XMLHttpRequest does).
export function upload(repo, branch, path, file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    const url = `/api/v1/repositories/${enc(repo)}/branches/${enc(branch)}/objects${query({ path })}`;
    xhr.open("POST", url);
    const auth = authHeader();
    if (auth.Authorization) xhr.setRequestHeader("Authorization", auth.Authorization);
    xhr.setRequestHeader("Content-Type", file.type || "application/octet-stream");
    xhr.upload.addEventListener("progress", (ev) => {
      if (ev.lengthComputable) onProgress(ev.loaded / ev.total);
    });
    xhr.addEventListener("load", () => {
      if (xhr.status >= 200 && xhr.status < 300) { onProgress(1); resolve(JSON.parse(xhr.responseText)); return; }
      let message = `${xhr.status}`;
      try { message = JSON.parse(xhr.responseText).message || message; } catch { /* not JSON */ }
      if (xhr.status === 401) onUnauthorized();
      reject(new ApiError(xhr.status, message, null));
    });
    xhr.addEventListener("error", () => reject(new ApiError(0, "network error", null)));
    xhr.send(file);
  });
}

// An object's bytes through the API (the token cannot go into a plain link).
export async function objectBlob(repo, ref, path) {
  const res = await call("GET", `/repositories/${enc(repo)}/refs/${enc(ref)}/objects${query({ path })}`, { raw: true });
  return res.blob();
}

// Save an object through the API.
export async function download(repo, ref, path) {
  const url = URL.createObjectURL(await objectBlob(repo, ref, path));
  const a = document.createElement("a");
  a.href = url;
  a.download = path.split("/").pop() || "object";
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
