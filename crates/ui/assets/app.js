// skillbox dashboard: progressive enhancement only; every page works without this script.
"use strict";

// Live call states: refresh the state and failure cells of the calls on this page.
function liveCalls() {
  const cells = document.querySelectorAll("[data-call-state]");
  if (cells.length === 0) return;
  // Where to ask, as the page gives it (at the session's own address, the only path its
  // cookie is sent to): the server writes every dashboard address, the script none.
  const live = document.querySelector("[data-live]");
  if (!live) return;
  const refresh = () => {
    fetch(live.dataset.live, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then((r) => (r.ok ? r.json() : null))
      .then((body) => {
        if (!body) return;
        for (const c of body.calls) {
          const state = document.querySelector(`[data-call-state="${CSS.escape(c.key)}"]`);
          if (state && state.textContent !== c.state) state.textContent = c.state;
          const failure = document.querySelector(`[data-call-failure="${CSS.escape(c.key)}"]`);
          if (failure) failure.textContent = c.failure ? `${c.failure.words} (${c.failure.code})` : "";
        }
      })
      .catch(() => {});
  };
  setInterval(refresh, 1000);
}

// A SKILL.md chosen in a file input is loaded into its textarea (the form posts text).
function fileLoaders() {
  for (const input of document.querySelectorAll("input[type=file][data-load-into]")) {
    input.addEventListener("change", () => {
      const target = document.getElementById(input.dataset.loadInto);
      const file = input.files && input.files[0];
      if (!target || !file) return;
      file.text().then((t) => { target.value = t; });
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  liveCalls();
  fileLoaders();
});
