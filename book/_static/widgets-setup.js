// capsule-lab book: glue between the vendored widget JavaScript and this site. Loaded (by myst-nb's
// nb_ipywidgets_js, see _config.yml) on pages with stored widgets, after require.js and before the
// html-manager bundle (vendor/html-manager/embed-amd.js).
(function () {
  "use strict";

  // 1. The html-manager bundle loads its icon fonts from the folder of its AMD module, whose URL
  //    RequireJS derives from the module name relative to the page. Point that name at the vendored
  //    folder so the fonts come from _static/vendor/html-manager/ on every page, at any depth.
  var root = document.documentElement.getAttribute("data-content_root") || "./";
  var folder = new URL(root + "_static/vendor/html-manager", document.baseURI).href;
  if (window.require && window.require.config) {
    window.require.config({ paths: { "@jupyter-widgets/html-manager/dist": folder } });
  }

  // 2. ipywidgets 8 typesets widget labels with the MathJax 2 call
  //    MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]); the book loads MathJax 3, which has no
  //    Hub, so every labelled widget threw "Cannot read properties of undefined (reading 'Queue')".
  //    Provide that one call on top of MathJax 3. Widgets render on the window "load" event, after
  //    DOMContentLoaded, when the deferred MathJax 3 script has already defined its global object.
  document.addEventListener("DOMContentLoaded", function () {
    var mj = window.MathJax;
    if (!mj || mj.Hub) {
      return;
    }
    mj.Hub = {
      Queue: function () {
        Array.prototype.forEach.call(arguments, function (cmd) {
          if (!Array.isArray(cmd) || cmd[0] !== "Typeset") {
            return;
          }
          var element = cmd[2];
          var ready = (window.MathJax.startup && window.MathJax.startup.promise) || Promise.resolve();
          ready
            .then(function () {
              return window.MathJax.typesetPromise
                ? window.MathJax.typesetPromise(element ? [element] : undefined)
                : null;
            })
            .catch(function (err) {
              console.warn("MathJax could not typeset a widget label:", err);
            });
        });
      },
    };
  });
})();
