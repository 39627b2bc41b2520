// The status page's only script: it takes a token handed in the URL's
// fragment to the login form, takes it out of the address bar and the
// history, and refreshes the page's content in place.
(function () {
  'use strict';
  // A token in the fragment goes to the login form, and out of the
  // address bar and the history.
  function takeToken() {
    var hash = location.hash;
    if (hash.indexOf('#token=') !== 0) {
      return false;
    }
    history.replaceState(null, '', location.pathname + location.search);
    var form = document.getElementById('login');
    if (!form) {
      return false; // signed in already
    }
    var token = hash.slice(7);
    try { token = decodeURIComponent(token); } catch (e) { /* used as written */ }
    form.elements.token.value = token;
    form.submit();
    return true;
  }
  window.addEventListener('hashchange', takeToken);
  if (takeToken()) {
    return;
  }
  var every = parseInt(document.body.getAttribute('data-refresh-ms'), 10);
  if (!every) {
    return;
  }
  var auto = document.getElementById('auto');
  var busy = false;
  function note(text) {
    var el = document.getElementById('refresh-state');
    if (el) {
      el.textContent = text;
    }
  }
  function refresh() {
    if (busy || document.hidden || (auto && !auto.checked)) {
      return;
    }
    busy = true;
    fetch(location.pathname + location.search, { credentials: 'same-origin', cache: 'no-store' })
      .then(function (r) {
        if (r.status === 401) {
          location.reload(); // the session ended: show the login page
          return null;
        }
        if (!r.ok && r.status !== 404) {
          throw new Error('HTTP ' + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        if (html === null) {
          return;
        }
        // Only main is parsed: the new page's style and script carry
        // another nonce, which this page's policy rightly refuses.
        var from = html.indexOf('<main'), to = html.lastIndexOf('</main>');
        if (from < 0 || to < from) {
          throw new Error('no content in the response');
        }
        var next = new DOMParser().parseFromString(html.slice(from, to + 7), 'text/html').getElementById('main');
        var cur = document.getElementById('main');
        if (next && cur) {
          // Keep what the reader opened or closed.
          var closed = {};
          cur.querySelectorAll('details').forEach(function (d, i) { closed[i] = !d.open; });
          next.querySelectorAll('details').forEach(function (d, i) { if (closed[i]) { d.open = false; } });
          cur.replaceWith(document.importNode(next, true));
        }
      })
      .catch(function (e) { note(' · refresh failed: ' + e.message); })
      .then(function () { busy = false; });
  }
  setInterval(refresh, every);
  document.addEventListener('visibilitychange', refresh);
})();
