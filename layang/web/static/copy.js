// Copy buttons: each copies its data-copy text. A script file, not inline, for the pages' CSP.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  event.preventDefault();
  try {
    await navigator.clipboard.writeText(button.dataset.copy);
    button.textContent = "Copied";
  } catch (error) {
    button.textContent = "Select and copy";
  }
});
