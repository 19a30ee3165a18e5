// The page's live parts, on top of plain forms that work without it: the note's character
// count, the rail's new toasts as they arrive (Server-Sent Events), and undo in place.
"use strict";

function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

function liveCount() {
  const text = document.getElementById("note-text");
  const out = document.getElementById("note-count");
  const status = document.getElementById("note-over"); // read out only when crossing the limit
  if (!text || !out) return;
  const limit = Number(text.dataset.limit);
  let wasOver = false;
  const update = () => {
    const n = text.value.trim().length;
    const over = n > limit;
    out.textContent = `${n} / ${limit}` + (over ? ` (${n - limit} too many)` : "");
    out.classList.toggle("over", over);
    if (status && over !== wasOver) {
      status.textContent = over ? `Over the ${limit}-character limit` : "Within the limit";
    }
    wasOver = over;
  };
  text.addEventListener("input", update);
  update();
}

function toastItem(n) {
  const li = document.createElement("li");
  li.className = "toast fresh";
  li.id = `toast-${n.id}`;
  const text = document.createElement("p");
  text.textContent = n.text.replace(/ · undo$/, "");
  const when = document.createElement("p");
  when.className = "meta";
  when.textContent = "just now";
  const form = document.createElement("form");
  form.method = "post";
  form.action = `/notices/${n.id}/undo`;
  form.className = "inline undo";
  const csrf = document.createElement("input");
  csrf.type = "hidden";
  csrf.name = "csrf";
  csrf.value = csrfToken();
  const button = document.createElement("button");
  button.type = "submit";
  button.className = "small";
  button.textContent = "Undo";
  button.setAttribute("aria-label", `Undo: ${text.textContent}`);
  form.append(csrf, button);
  li.append(text, when, form);
  return li;
}

async function refreshMemories() {
  // New lines arrived with the toast: swap in the server's rendering of the section, for the
  // search the page is showing (not the unfiltered list), and keep what is typed in the box.
  const q = new URLSearchParams(location.search).get("q");
  const res = await fetch(q ? `/?q=${encodeURIComponent(q)}` : "/", { credentials: "same-origin" });
  if (!res.ok) return;
  const doc = new DOMParser().parseFromString(await res.text(), "text/html");
  const fresh = doc.getElementById("memories");
  const here = document.getElementById("memories");
  if (fresh && here && !here.contains(document.activeElement)) {
    const typed = document.getElementById("search-q")?.value;
    here.replaceWith(fresh);
    const box = document.getElementById("search-q");
    if (box && typed !== undefined) box.value = typed;
    watchMore();
  }
}

async function undoInPlace(ev) {
  // The same write as the form, through the API: the rail stays as it is, no reload.
  const form = ev.target.closest("form.undo");
  if (!form) return;
  ev.preventDefault();
  const res = await fetch(`/api${new URL(form.action).pathname}`, {
    method: "POST",
    credentials: "same-origin",
    headers: { "X-CSRF-Token": csrfToken() },
  });
  if (!res.ok) {
    form.submit(); // let the server's page say what went wrong
    return;
  }
  const { deleted } = await res.json();
  const li = form.closest("li");
  const said = document.createElement("p");
  said.className = "meta";
  said.textContent = `Undone: ${deleted} line${deleted === 1 ? "" : "s"} deleted`;
  li.classList.add("undone");
  form.replaceWith(said);
  document.getElementById("rail-live").textContent = said.textContent;
  refreshMemories();
}

function liveRail() {
  const rail = document.getElementById("rail");
  const list = document.getElementById("rail-list");
  const live = document.getElementById("rail-live");
  if (!rail || !list || !window.EventSource) return;
  const source = new EventSource(`/api/notices/stream?after=${rail.dataset.after || 0}`);
  source.addEventListener("toast", (ev) => {
    const n = JSON.parse(ev.data);
    if (document.getElementById(`toast-${n.id}`)) return;
    document.getElementById("rail-empty")?.remove();
    list.prepend(toastItem(n));
    live.textContent = `New: ${n.text.replace(/ · undo$/, "")}`;
    refreshMemories();
  });
  rail.dataset.live = "1"; // the tests wait on this: the stream is open
  source.addEventListener("open", () => { rail.dataset.connected = "1"; });
}

async function loadMore(more) {
  // The next page, as the server renders it (the "Older lines" link works without this):
  // its lines join their personas' lists here, and its own link takes this one's place.
  if (more.dataset.loading) return;
  more.dataset.loading = "1";
  const res = await fetch(more.href, { credentials: "same-origin" });
  if (res.status === 409) {
    // A line was closed or reopened since the list was read: going on would show one twice
    // or skip one, so say so and offer the list from the top.
    const said = document.createElement("p");
    said.className = "hint";
    said.id = "changed";
    said.setAttribute("role", "status");
    said.textContent = "The lines changed while you scrolled. ";
    const again = document.createElement("a");
    again.href = "/" + location.search.replace(/([?&])cursor=[^&]*&?/, "$1") + "#memories";
    again.textContent = "Show them again from the top";
    said.append(again);
    more.parentElement.replaceWith(said);
    return;
  }
  if (!res.ok) {
    delete more.dataset.loading;
    return;
  }
  const doc = new DOMParser().parseFromString(await res.text(), "text/html");
  for (const list of doc.querySelectorAll("ul.lines")) {
    const here = document.getElementById(list.id);
    if (here) here.append(...list.children);
  }
  const next = doc.getElementById("more");
  if (next) {
    more.setAttribute("href", next.getAttribute("href"));
    delete more.dataset.loading;
    watchMore();
  } else {
    more.parentElement.remove();
  }
}

let moreWatcher = null;

function watchMore() {
  // Scrolling near the end of the lines loads the next page.
  const more = document.getElementById("more");
  if (!more || !window.IntersectionObserver) return;
  moreWatcher?.disconnect();
  moreWatcher = new IntersectionObserver((seen) => {
    if (seen.some((e) => e.isIntersecting)) loadMore(more);
  }, { rootMargin: "400px" });
  moreWatcher.observe(more);
}

async function exportWithProgress(ev) {
  // The export through the API, so the page can count the lines as they stream in; the
  // form posts to /export and downloads the same file without this.
  const form = ev.target;
  const fmt = ev.submitter?.value || "json";
  ev.preventDefault();
  const bar = document.getElementById("export-progress");
  const status = document.getElementById("export-status");
  const buttons = form.querySelectorAll("button");
  buttons.forEach((b) => { b.disabled = true; });
  status.textContent = "Preparing your copy…";
  try {
    const res = await fetch(`/api/export?format=${fmt}`, {
      credentials: "same-origin",
      headers: { "X-CSRF-Token": csrfToken() },
    });
    if (!res.ok) {
      const said = await res.json().catch(() => ({ error: `error ${res.status}` }));
      status.textContent = `Not exported: ${said.error}.`;
      return;
    }
    const total = Number(res.headers.get("X-Export-Lines")) || 0;
    const mark = fmt === "json" ? '{"persona":' : "\n- **";
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    const parts = [];
    let tail = "";
    let lines = 0;
    bar.hidden = false;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      parts.push(value);
      const text = tail + decoder.decode(value, { stream: true });
      lines += text.split(mark).length - 1;
      tail = text.slice(-mark.length + 1);
      bar.value = total ? Math.min(1, lines / total) : 0;
      status.textContent = `Preparing your copy… ${Math.min(lines, total)} of ${total} lines`;
    }
    bar.value = 1;
    const name = /filename="([^"]+)"/.exec(res.headers.get("Content-Disposition") || "");
    const link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob(parts, { type: res.headers.get("Content-Type") }));
    link.download = name ? name[1] : `memories.${fmt}`;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
    status.textContent = `Downloaded ${link.download}: ${total} line${total === 1 ? "" : "s"}.`;
  } finally {
    buttons.forEach((b) => { b.disabled = false; });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("export-form")?.addEventListener("submit", exportWithProgress);
  liveCount();
  liveRail();
  watchMore();
  document.getElementById("rail")?.addEventListener("submit", undoInPlace);
});
