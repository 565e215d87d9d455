// The page at `/`: a user's home timeline, own posts (each with a Delete button when the
// pasted token may delete it), followers and following, and the consumers' lag, read from this
// API only (same origin, no build step, no third-party code). The user shown
// is in the location hash (#user=ID), so the back button walks back through the graph. Text
// from the API is only ever set with textContent, never parsed as HTML.
"use strict";

const TIMELINE_PAGE = 20;
const LIST_PAGE = 50;
const STATS_EVERY_MS = 3000;
const TOKEN_KEY = "fanout-token";
const PUBLISH = "fanout:publish";
const PUBLISH_ALL = "fanout:publish-all";
// A user id, as the API's rule says; "." and ".." are ids too, but as a path segment the
// browser would resolve them (to /v1/users/../followers = /v1/followers): not shown here.
const USER_ID = /^[A-Za-z0-9_.:@-]{1,64}$/;

const $ = (id) => document.getElementById(id);
let current = null; // the user shown
let previousStats = null; // the last /v1/stats snapshot, for rates

class ApiError extends Error {}

class BadUser extends Error {}

function checkedUser(user) {
  if (!USER_ID.test(user) || user === "." || user === "..") {
    throw new BadUser(`not a user id this page can show: ${JSON.stringify(user.slice(0, 80))}`);
  }
  return user;
}

// GET `path`, or POST `event` to it as JSON when one is given.
async function api(path, event) {
  // The token goes only where the path says: a path the URL parser would rewrite is refused.
  if (new URL(path, location.origin).pathname !== path.split("?")[0]) {
    throw new ApiError(`refused to fetch ${path}`);
  }
  const headers = { Accept: "application/json" };
  const token = $("token").value.trim();
  if (token) headers.Authorization = "Bearer " + token;
  const request = { headers };
  if (event !== undefined) {
    headers["Content-Type"] = "application/json";
    Object.assign(request, { method: "POST", body: JSON.stringify(event) });
  }
  const response = await fetch(path, request);
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    let why = body && body.detail ? body.detail : response.statusText;
    if (response.status === 401) why += " (paste a bearer token above)";
    throw new ApiError(`${response.status}: ${why}`);
  }
  return body;
}

// The pasted token's claims, read without checking the signature: they only decide which
// buttons the page shows. The API checks the token on every request whatever the page shows.
function claims(token) {
  try {
    return JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
  } catch {
    return null;
  }
}

// Whether the token may delete `author`'s posts, by the API's rule: publishing, for its own sub
// or for anyone. Without a token the API is open (or answers 401, which is shown).
function mayDelete(author) {
  const token = $("token").value.trim();
  if (!token) return true;
  const found = claims(token);
  const scopes = found && typeof found.scope === "string" ? found.scope.split(" ") : [];
  return scopes.includes(PUBLISH) && (found.sub === author || scopes.includes(PUBLISH_ALL));
}

function showError(error) {
  $("error").textContent = error ? String(error.message || error) : "";
}

function userLink(user) {
  const a = document.createElement("a");
  a.className = "user";
  a.href = "#user=" + encodeURIComponent(user);
  a.textContent = user;
  return a;
}

function item(...children) {
  const li = document.createElement("li");
  li.append(...children);
  return li;
}

// A paged list: `fetchPage(cursor)` answers {items, next}; "more" appends the next page.
function pager(listId, moreId, fetchPage, render) {
  let next = null;
  let generation = 0; // a newer reset makes an older page's answer moot
  async function load(reset) {
    const mine = reset ? ++generation : generation;
    if (reset) {
      $(listId).replaceChildren();
      next = null;
    }
    const page = await fetchPage(next);
    if (mine !== generation) return page;
    $(listId).append(...page.items.map(render));
    next = page.next;
    $(moreId).hidden = next === null;
    return page;
  }
  $(moreId).addEventListener("click", () => load(false).then(() => showError(null), showError));
  return load;
}

const q = encodeURIComponent;

const timeline = pager(
  "timeline",
  "timeline-more",
  async (cursor) => {
    let path = `/v1/timelines/${q(current)}?limit=${TIMELINE_PAGE}`;
    if (cursor) path += `&cursor=${q(cursor)}`;
    const body = await api(path);
    $("timeline-end").hidden = body.next !== null;
    return { items: body.posts, next: body.next };
  },
  (post) => item(userLink(post.author), " ", ...postParts(post)),
);

// A post's id, text and time, as every list of posts shows them. The text is set with
// textContent like everything else, so a post that reads like markup is shown as the
// characters it is.
function postParts(post) {
  const id = document.createElement("span");
  id.className = "post-id";
  id.textContent = post.post_id;
  const text = document.createElement("span");
  text.className = "text";
  text.textContent = post.text === null ? "" : post.text;
  const when = document.createElement("span");
  when.className = "when";
  when.textContent = new Date(post.ts).toLocaleString();
  return [id, " ", text, " ", when];
}

// Publishes the post's deletion, then reloads the posts: the post is gone once the fan-out
// consumer has applied the deletion.
function deleteButton(post) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "delete";
  button.textContent = "Delete";
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await api("/v1/events", { type: "post_deleted", author: post.author, post_id: post.post_id });
      await posts(true);
      showError(null);
    } catch (error) {
      button.disabled = false;
      showError(error);
    }
  });
  return button;
}

// The user's own posts with their texts.
const posts = pager(
  "posts",
  "posts-more",
  async (cursor) => {
    let path = `/v1/users/${q(current)}/posts?limit=${TIMELINE_PAGE}`;
    if (cursor) path += `&cursor=${q(cursor)}`;
    const body = await api(path);
    return { items: body.posts, next: body.next };
  },
  (post) => {
    const parts = postParts(post);
    if (post.author === current && mayDelete(post.author)) parts.push(deleteButton(post));
    return item(...parts);
  },
);

function members(kind) {
  return pager(
    kind,
    `${kind}-more`,
    async (cursor) => {
      let path = `/v1/users/${q(current)}/${kind}?limit=${LIST_PAGE}`;
      if (cursor) path += `&cursor=${q(cursor)}`;
      const body = await api(path);
      $(`${kind}-count`).textContent = String(body.count);
      return { items: body.members, next: body.next };
    },
    (member) => item(userLink(member)),
  );
}
const followers = members("followers");
const following = members("following");

async function show(user) {
  try {
    checkedUser(user);
  } catch (error) {
    showError(error);
    return;
  }
  current = user;
  $("user").value = user;
  for (const id of ["current-user", "posts-user"]) {
    $(id).textContent = user;
    $(id).className = "";
  }
  for (const kind of ["followers", "following"]) $(`${kind}-count`).textContent = "…";
  // Settled one by one: a timeline refused to this token still shows the public lists.
  const results = await Promise.allSettled([
    timeline(true),
    posts(true),
    followers(true),
    following(true),
  ]);
  const failed = results.find((r) => r.status === "rejected");
  showError(failed ? failed.reason : null);
}

// The user in the fragment, or null (and the reason shown) when there is none or it is not one
// the page can show: a malformed fragment must not stop the page from loading.
function userFromHash() {
  const match = /^#user=(.+)$/.exec(location.hash);
  if (!match) return null;
  try {
    return checkedUser(decodeURIComponent(match[1]));
  } catch (error) {
    showError(error instanceof URIError ? new BadUser("the #user= in the address is not valid") : error);
    return null;
  }
}

async function refreshStats() {
  let snapshot;
  try {
    snapshot = await api("/v1/stats");
  } catch (error) {
    $("stats").replaceChildren(item(`unavailable: ${error.message}`));
    return;
  }
  const before = new Map((previousStats ? previousStats.consumers : []).map((c) => [c.consumer, c]));
  const seconds = previousStats ? (snapshot.at - previousStats.at) / 1000 : 0;
  $("stats").replaceChildren(
    ...snapshot.consumers.map((c) => {
      const tr = document.createElement("tr");
      tr.dataset.consumer = c.consumer;
      const old = before.get(c.consumer);
      const rate = old && seconds > 0 ? ((c.committed - old.committed) / seconds).toFixed(1) : "…";
      for (const text of [c.consumer, String(c.lag), rate, String(c.committed)]) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.append(td);
      }
      return tr;
    }),
  );
  previousStats = snapshot;
}

$("pick").addEventListener("submit", (event) => {
  event.preventDefault();
  const user = $("user").value.trim();
  if (!user) return;
  const hash = "#user=" + encodeURIComponent(user);
  if (location.hash === hash) show(user); // no hashchange: reload what is shown
  else location.hash = hash;
});
$("token").value = sessionStorage.getItem(TOKEN_KEY) || "";
$("token").addEventListener("change", () => {
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  if (current) show(current);
});
window.addEventListener("hashchange", () => {
  const user = userFromHash();
  if (user) show(user);
});

const first = userFromHash();
if (first) show(first);
refreshStats();
setInterval(refreshStats, STATS_EVERY_MS);
