"""`snakemake --report results/report.html` on the test run: every figure embedded with its caption and
category, and the report's app actually showing each figure in a headless browser.

Snakemake 9's report is one self-contained HTML page: a React app whose data are inline scripts
(`var results = {...}`: per result its caption as HTML, category, labels and the file as a base64 data URI;
`var categories = {...}`). The static test reads those; the browser test loads the page in headless Chromium
with a small driver appended that, once the app has mounted, does what the report's buttons do (show each
figure, show its result info) and writes what it saw into the DOM, which `--dump-dom` returns.
"""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

pytest.register_assert_rewrite("lg_runs")
from lg_runs import snakemake  # noqa: E402

pytest_plugins = ["lg_runs"]

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def report_var(page: str, name: str):
    """The JSON value of `var <name> = ...;` in one of the report's inline scripts."""
    m = re.search(rf"<script[^>]*>\s*var {name} = (.*?);\s*</script>", page, flags=re.S)
    assert m, f"report.html has no `var {name}`"
    return json.loads(m.group(1))


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def visible_text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


@pytest.fixture(scope="module")
def report(reference_run) -> Path:
    snakemake(reference_run, "--report", "results/report.html")
    path = reference_run / "results" / "report.html"
    assert path.is_file() and path.stat().st_size > 0
    return path


@pytest.fixture(scope="module")
def figures(reference_run) -> dict[str, Path]:
    """Every figure of the run (docs/outputs.md: results/figures/, as PNG and PDF; the report embeds the PNGs)."""
    figs = {
        p.relative_to(reference_run).as_posix(): p for p in sorted((reference_run / "results/figures").glob("*.png"))
    }
    assert figs, "the test run made no figures"
    return figs


def test_report_embeds_every_figure_with_caption_and_category(report, figures):
    page = report.read_text()
    results = report_var(page, "results")
    categories = report_var(page, "categories")
    missing = sorted(set(figures) - set(results))
    assert not missing, f"figures not in the report: {missing}"
    placed = {p: (c, s) for c, subs in categories.items() for s, paths in subs.items() for p in paths}
    problems = []
    for path, file in figures.items():
        entry = results[path]
        head, b64 = entry["data_uri"].split(",", 1)
        if entry["mime_type"] != "image/png" or not head.startswith("data:image/png"):
            problems.append(f"{path}: embedded as {entry['mime_type']} ({head[:40]})")
        elif base64.b64decode(b64) != file.read_bytes():
            problems.append(f"{path}: the embedded image is not the file")
        caption = visible_text(entry["caption"])
        if not caption:
            problems.append(f"{path}: empty caption")
        # docutils renders rst errors into the caption as "System Message: WARNING/2 (...) ..."
        for msg in re.findall(r"System Message: \S+ \(.*?\)\s*(.*?)(?=System Message|$)", caption):
            problems.append(f"{path}: caption rst problem: {msg.strip()[:120]}")
        if "{{" in caption or "snakemake.wildcards" in caption:
            problems.append(f"{path}: unrendered caption template: {caption[:120]}")
        if path not in placed or not placed[path][0]:
            problems.append(f"{path}: in no category")
    assert not problems, "\n".join(sorted(set(problems)))
    assert visible_text(report_var(page, "workflow_desc")), "empty workflow description (report/workflow.rst)"


DRIVER = """<script>
(async () => {
  const out = {app: false, errors: [], menu: "", figures: {}};
  window.addEventListener("error", e => out.errors.push(String(e.message)));
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const text = () => document.querySelector("#app").innerText;
  for (let i = 0; i < 200 && !(typeof app !== "undefined" && app); i++) await sleep(50);
  out.app = typeof app !== "undefined" && !!app;
  if (out.app) {
    await sleep(200);
    out.menu = text();
    for (const [path, entry] of Object.entries(results)) {
      if (!entry.mime_type.startsWith("image/")) continue;
      // what the result's button does (ButtonViewManager.handleImg), then its info panel
      app.setView({content: "img", contentPath: entry.data_uri, resultPath: path});
      await sleep(100);
      const img = [...document.querySelectorAll("#app img")].find(i => i.getAttribute("src") === entry.data_uri);
      const r = {rendered: !!img};
      if (img) {
        // (not img.decode(): its promise stalls Chromium's virtual time, which --dump-dom waits on)
        for (let i = 0; i < 100 && !(img.complete && img.naturalWidth); i++) await sleep(20);
        if (!img.complete || !img.naturalWidth) r.decode_error = "not decoded";
        r.width = img.naturalWidth; r.height = img.naturalHeight;
        const c = document.createElement("canvas"); c.width = r.width; c.height = r.height;
        const ctx = c.getContext("2d"); ctx.drawImage(img, 0, 0);
        const d = ctx.getImageData(0, 0, c.width, c.height).data, colours = new Set();
        for (let k = 0; k < d.length; k += 4 * 7) colours.add((d[k] << 24) | (d[k + 1] << 16) | (d[k + 2] << 8) | d[k + 3]);
        r.colours = colours.size;
      }
      app.showResultInfo(path);
      await sleep(100);
      r.info = text();
      out.figures[path] = r;
    }
  }
  const pre = document.createElement("pre"); pre.id = "lg-check"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def browser() -> str | None:
    return next((b for b in map(shutil.which, BROWSERS) if b), None)


def test_report_renders_every_figure_in_a_browser(report, figures, tmp_path):
    exe = browser()
    if exe is None:
        pytest.skip("no headless Chromium (Debian: apt-get install chromium; .ci/run installs it)")
    page = report.read_text()
    results = report_var(page, "results")
    categories = report_var(page, "categories")
    i = page.rindex("</body>")
    probe = tmp_path / "report_probe.html"
    probe.write_text(page[:i] + DRIVER + page[i:])
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
             "--virtual-time-budget=120000", "--dump-dom"]  # fmt: skip
    res = subprocess.run([exe, *flags, probe.as_uri()], capture_output=True, text=True, timeout=300)
    m = re.search(r'<pre id="lg-check">(.*?)</pre>', res.stdout, flags=re.S)
    assert m, f"the driver wrote nothing (exit {res.returncode}):\n{res.stderr[-2000:]}"
    seen = json.loads(html.unescape(m.group(1)))
    assert seen["app"], "the report's React app did not mount"
    assert not seen["errors"], f"JavaScript errors: {seen['errors']}"
    for cat in categories:
        assert cat in seen["menu"], f"category '{cat}' is not in the report's menu"
    problems = []
    for path, file in figures.items():
        r = seen["figures"].get(path, {})
        if not r.get("rendered"):
            problems.append(f"{path}: no <img> shown")
            continue
        if (r["width"], r["height"]) != png_size(file.read_bytes()) or "decode_error" in r:
            problems.append(f"{path}: shown at {r['width']}x{r['height']} ({r.get('decode_error', 'decoded')})")
        if r["colours"] < 2:
            problems.append(f"{path}: the rendered image is blank (one colour)")
        caption = visible_text(results[path]["caption"])
        if " ".join(caption.split())[:60] not in " ".join(r["info"].split()):
            problems.append(f"{path}: its info panel does not show the caption '{caption[:60]}'")
    assert not problems, "\n".join(problems)
