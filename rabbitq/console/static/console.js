// rabbitq console: optional conveniences only; every page works without JavaScript.
document.addEventListener("DOMContentLoaded", () => {
  const all = document.querySelector("[data-select-all]");
  const boxes = () => Array.from(document.querySelectorAll('input[type=checkbox][name=k]'));
  const counter = document.querySelector("[data-selected]");
  const update = () => { if (counter) counter.textContent = boxes().filter(b => b.checked).length; };
  if (all) all.addEventListener("change", () => { boxes().forEach(b => { b.checked = all.checked; }); update(); });
  boxes().forEach(b => b.addEventListener("change", update));
  // A confirmation button is pressed once: a double click must not start a second job.
  document.querySelectorAll("form").forEach(f => f.addEventListener("submit", () => {
    const b = f.querySelector("[data-confirm]");
    if (b) setTimeout(() => { b.disabled = true; }, 0);
  }));
});
