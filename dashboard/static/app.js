// The dashboard's only script: selection helpers and confirmations for
// action forms, and the auto-refresh toggle. Pages work without it.
(function () {
  "use strict";
  function refresh(form) {
    var any = form.querySelector('input[name="id"]:checked') !== null;
    form.querySelectorAll("[data-needs-selection]").forEach(function (b) { b.disabled = !any; });
  }
  document.querySelectorAll("form.selection").forEach(function (form) {
    refresh(form);
    form.addEventListener("change", function (e) {
      if (e.target.matches("[data-select-all]")) {
        form.querySelectorAll('input[name="id"]').forEach(function (c) { c.checked = e.target.checked; });
      }
      refresh(form);
    });
  });
  document.querySelectorAll("button[data-confirm]").forEach(function (b) {
    b.addEventListener("click", function (e) {
      if (!window.confirm(b.getAttribute("data-confirm"))) { e.preventDefault(); }
    });
  });
  // Auto-refresh: every 10 s, on unless turned off; the choice is kept in
  // localStorage. No reload while rows are ticked or a field has focus.
  var box = document.getElementById("autorefresh");
  if (box) {
    var key = "txmsg.autorefresh", timer = null;
    var load = function () { try { return window.localStorage.getItem(key); } catch (e) { return null; } };
    var save = function (v) { try { window.localStorage.setItem(key, v); } catch (e) { /* kept for this page only */ } };
    var busy = function () {
      var a = document.activeElement;
      return document.querySelector('form.selection input[name="id"]:checked') !== null ||
        (a && a !== box && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName));
    };
    var schedule = function () {
      window.clearTimeout(timer);
      if (box.checked) {
        timer = window.setTimeout(function () {
          if (busy()) { schedule(); } else { window.location.reload(); }
        }, 10000);
      }
    };
    box.checked = load() !== "off";
    box.addEventListener("change", function () { save(box.checked ? "on" : "off"); schedule(); });
    schedule();
  }
})();
