// The console's one script (no inline scripts: the Content-Security-Policy allows none).
// Filters lists, and follows the audit stream on the Activity page.
"use strict";

function filterList(input) {
  const items = document.querySelectorAll(input.dataset.filter);
  const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
  for (const item of items) {
    const text = item.textContent.toLowerCase();
    item.hidden = !words.every((w) => text.includes(w));
  }
}

function matches(row) {
  for (const input of document.querySelectorAll("input[data-column]")) {
    const want = input.value.trim().toLowerCase();
    const have = (row.dataset[input.dataset.column] || "").toLowerCase();
    if (want && !have.includes(want)) return false;
  }
  return true;
}

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  row.appendChild(td);
}

function followActivity(table) {
  const body = table.querySelector("tbody");
  const status = document.getElementById("stream-state");
  const source = new EventSource(table.dataset.stream);
  source.onopen = () => { status.textContent = "Live: new calls appear at the top."; };
  source.onerror = () => { status.textContent = "Disconnected; retrying…"; };
  source.onmessage = (event) => {
    let entry;
    try { entry = JSON.parse(event.data); } catch (e) { return; }
    const row = document.createElement("tr");
    row.dataset.user = entry.user || "";
    row.dataset.server = entry.server || "";
    row.dataset.outcome = entry.outcome || "";
    row.className = "outcome-" + String(entry.outcome || "").replace(/[^a-z_-]/gi, "");
    cell(row, (entry.time || "").replace("T", " ").replace("Z", ""));
    cell(row, entry.user);
    cell(row, entry.server);
    cell(row, entry.tool);
    cell(row, entry.outcome);
    cell(row, entry.duration_ms);
    row.hidden = !matches(row);
    body.insertBefore(row, body.firstChild);
    while (body.rows.length > 500) body.deleteRow(body.rows.length - 1);
  };
  window.addEventListener("pagehide", () => source.close());
}

document.addEventListener("DOMContentLoaded", () => {
  for (const input of document.querySelectorAll("input[data-filter]")) {
    input.addEventListener("input", () => filterList(input));
  }
  for (const input of document.querySelectorAll("input[data-column]")) {
    input.addEventListener("input", () => {
      for (const row of document.querySelectorAll("#activity tbody tr")) row.hidden = !matches(row);
    });
  }
  const activity = document.getElementById("activity");
  if (activity) followActivity(activity);
});
