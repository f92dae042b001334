// `baton dashboard` opens /login#token=...: a fragment never reaches a server, a proxy or
// a log. Take it out of the address bar at once, then log in with it by POST, as the form
// does (with the form's nonce, so batond knows the login comes from its own page).
// Only when the browser says no other site sent it here (data-auto, from Sec-Fetch-Site):
// a link on another site must not log the visitor in with the token it chose.
const found = /^#token=([^&]+)/.exec(window.location.hash);
if (found) {
  window.history.replaceState(null, '', window.location.pathname);
  const form = document.getElementById('login');
  if (form.dataset.auto === 'on') {
    form.elements.token.value = decodeURIComponent(found[1]);
    form.submit();
  }
}
