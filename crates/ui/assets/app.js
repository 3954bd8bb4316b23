// skillbox dashboard: progressive enhancement only; every page works without this script.
"use strict";

// Live call states: refresh the state and failure cells of the calls on this page.
function liveCalls() {
  const cells = document.querySelectorAll("[data-call-state]");
  if (cells.length === 0) return;
  // The session's own address (`/ui/s/<random>`): its cookie is sent under it only.
  const base = location.pathname.match(/^\/ui\/s\/[0-9a-f]+/);
  if (!base) return;
  const refresh = () => {
    fetch(`${base[0]}/live/calls`, { credentials: "same-origin", headers: { "Accept": "application/json" } })
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
