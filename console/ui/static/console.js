// inorder console: live refresh of the page's #live section, and the
// continuation of confirmed bulk actions. No data is ever inserted as
// markup it was not already, escaped, in the server's answer.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var every = live && parseInt(live.getAttribute("data-refresh") || "0", 10);
  if (every > 0) {
    var busy = false;
    var tick = function () {
      if (busy || document.hidden) return;
      var active = document.activeElement;
      if (active && live.contains(active) && active.tagName !== "BODY") return; // the operator is typing
      busy = true;
      fetch(location.href, { headers: { "X-Console-Fragment": "1" }, credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.text();
        })
        .then(function (html) {
          var doc = new DOMParser().parseFromString("<main>" + html + "</main>", "text/html");
          var fresh = doc.body.firstChild;
          live.replaceChildren.apply(live, Array.prototype.slice.call(fresh.childNodes));
          live.setAttribute("data-updated", String(Date.now()));
          live.classList.remove("stale");
        })
        .catch(function () { live.classList.add("stale"); })
        .finally(function () { busy = false; });
    };
    setInterval(tick, every);
  }
  // A confirmed bulk action that ran out of its time budget continues by
  // itself, on the same filter and the same bound.
  var cont = document.getElementById("continue-form");
  if (cont && cont.getAttribute("data-auto") === "1") {
    setTimeout(function () { cont.submit(); }, 200);
  }
})();
