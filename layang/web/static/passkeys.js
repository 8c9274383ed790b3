// Passkeys (WebAuthn): a button with data-options (a URL answering the ceremony's options as
// JSON) and data-ceremony ("create" or "get") runs it, puts the credential's JSON into its
// form's "credential" field and submits the form; the server checks everything.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-ceremony]");
  if (!button) return;
  event.preventDefault();
  const form = button.closest("form");
  const problem = form.querySelector(".passkey-problem");
  try {
    if (!window.PublicKeyCredential || !PublicKeyCredential.parseCreationOptionsFromJSON)
      throw new Error("This browser does not offer passkeys.");
    const answer = await fetch(button.dataset.options, { credentials: "same-origin" });
    if (!answer.ok) throw new Error("The server did not give the passkey options.");
    const options = await answer.json();
    const credential = button.dataset.ceremony === "create"
      ? await navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options) })
      : await navigator.credentials.get({ publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options) });
    form.querySelector("input[name=credential]").value = JSON.stringify(credential.toJSON());
    form.submit();
  } catch (error) {
    if (problem) { problem.textContent = error.message; problem.hidden = false; }
  }
});
