// Optional niceties; every page works without this script.
// Keep the hosted log scrolled to its end while the run is live (the page refreshes itself).
(function () {
  var log = document.getElementById("hosted-logs");
  if (log && log.dataset.follow === "yes") { log.scrollTop = log.scrollHeight; }
})();
