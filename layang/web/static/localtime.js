// Shows every <time datetime="…Z"> in the reader's own time zone, naming the zone; the UTC
// text the server wrote stays when scripts are off, and as the element's title.
(() => {
  const two = (n) => String(n).padStart(2, "0");
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  // "GMT+7", "PST": short, and correct for the date itself (summer time included).
  const zoneName = (date) => {
    const part = new Intl.DateTimeFormat("en-US", { timeZoneName: "short" })
      .formatToParts(date)
      .find((p) => p.type === "timeZoneName");
    return part ? part.value : zone;
  };
  const localize = () => {
    for (const element of document.querySelectorAll("time[datetime]")) {
      const date = new Date(element.getAttribute("datetime"));
      if (Number.isNaN(date.getTime())) continue;
      const precise = element.dataset.precision === "ms";
      let text = `${date.getFullYear()}-${two(date.getMonth() + 1)}-${two(date.getDate())} `
        + `${two(date.getHours())}:${two(date.getMinutes())}:${two(date.getSeconds())}`;
      if (precise) text += `.${String(date.getMilliseconds()).padStart(3, "0")}`;
      element.title = `${element.textContent.trim()}${zone ? ` · shown in ${zone}` : ""}`;
      element.textContent = `${text} ${zoneName(date)}`;
      element.classList.add("local");
    }
  };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", localize);
  } else {
    localize();
  }
})();
