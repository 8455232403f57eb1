// Raw payloads load when their <details> is opened; without JavaScript the
// "open" link shows them on a page of their own.
document.addEventListener("toggle", function (e) {
  var d = e.target;
  if (!d.matches || !d.matches("details[data-call]") || !d.open || d.dataset.loaded) return;
  d.dataset.loaded = "1";
  var box = d.querySelector(".raw");
  // The "open" link names the call's tenant for a reader of every tenant
  // (a call id is not the tenant's): load what it opens.
  var a = d.querySelector("a[href]");
  var u = a ? a.getAttribute("href") : "/calls/" + encodeURIComponent(d.dataset.call);
  fetch(u + (u.indexOf("?") < 0 ? "?" : "&") + "fragment=1", {credentials: "same-origin"})
    .then(function (r) { return r.text().then(function (t) { return {ok: r.ok, t: t}; }); })
    .then(function (r) { box.innerHTML = r.ok ? r.t : "cannot load: " + r.t; })
    .catch(function (err) { box.textContent = "cannot load: " + err; });
}, true);
