// evalkit web UI: small progressive enhancements; every page works without this file.
"use strict";

// Confirm destructive actions: <form data-confirm="Delete this?">.
document.addEventListener("submit", (event) => {
  const message = event.target.dataset && event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});

// Filter selects submit their form at once: <select data-autosubmit>.
document.addEventListener("change", (event) => {
  if (event.target.matches && event.target.matches("[data-autosubmit]")) event.target.form.submit();
});

// Keyboard: "/" focuses the page's search or first filter; "g" then "w" / "e" / "r" / "d" go to
// workspaces, experiments, runs (sessions of spans), docs; "t", the old key of that tab, too.
// Elements marked data-key="x" take the key x (the labelling queue: j, k, p, f).
let pendingG = false;
document.addEventListener("keydown", (event) => {
  const target = event.target;
  if (target.closest && target.closest("input, textarea, select, [contenteditable]")) return;
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  // A page names its own one-key actions: <a data-key="j"> is followed, a button is pressed.
  const action = !pendingG && event.key.length === 1 && document.querySelector(`[data-key="${event.key}"]`);
  if (action) { event.preventDefault(); action.click(); return; }
  if (event.key === "/") {
    const field = document.querySelector("[data-search], .filters input, .filters select");
    if (field) { event.preventDefault(); field.focus(); }
    return;
  }
  if (pendingG) {
    pendingG = false;
    const to = { w: "/", e: "/experiments", r: "/runs", t: "/runs", d: "/docs" }[event.key];
    if (to) window.location.href = to;
    return;
  }
  pendingG = event.key === "g";
});
