"""What a person sees: the study's Snakemake report and the MLflow UI over the shared smoke study, opened in
headless Chromium (Debian's package, driven by Playwright). Screenshots go to the test's temp dir, and
also to $SPECSWEEP_SCREENSHOTS (e.g. docs/img) shrunk, which is how the README's pictures are made."""
import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, snakemake, wait_for
from specsweep.server import stop_group

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("SPECSWEEP_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 90_000     # a 2-core machine under load renders MLflow's UI slowly


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: run scripts/install.sh (it installs Debian's chromium) "
                    "or set SPECSWEEP_CHROMIUM")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, timeout=TIMEOUT_MS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    yield context.new_page()
    context.close()


def screenshot(page, tmp_path: Path, name: str, **kwargs) -> Path:
    """A screenshot in the test's dir; with SPECSWEEP_SCREENSHOTS set, a shrunk copy there (for docs/)."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), **kwargs)
    out = os.environ.get("SPECSWEEP_SCREENSHOTS")
    if out:
        from PIL import Image

        image = Image.open(path).convert("RGB")
        image.thumbnail((1000, 1000))
        Path(out).mkdir(parents=True, exist_ok=True)
        image.quantize(colors=64).save(Path(out) / f"{name}.png", optimize=True)
    return path


def open_results(page, report: Path, category: str) -> int:
    """Open the report at one category's list of results; return how many results it lists."""
    page.goto(report.as_uri())
    page.get_by_role("link", name=category).click()
    return page.locator("a[iconname=eye]").count()


def test_report_shows_the_plots_and_the_summary_table(smoke, page, tmp_path):
    work, cfg = smoke
    results = work.parent / "results" / "smoke"
    report = tmp_path / "report.html"       # not in the shared study, whose files other tests compare
    out = snakemake(work, *cfg, "--report", str(report))
    assert out.returncode == 0 and report.exists(), out.stderr[-3000:]

    plots = sorted(p.stem for p in (results / "plots").glob("*.png"))
    assert open_results(page, report, "Plots") == len(plots) >= 5
    for name in plots:                       # every plot opens as an image the browser decoded
        page.goto(report.as_uri())
        page.get_by_role("link", name="Plots").click()
        page.get_by_role("row").filter(has_text=name).locator("a[iconname=eye]").click()
        image = page.locator("img[src^='data:image/png']")
        image.wait_for()
        assert image.evaluate("i => i.complete && i.naturalWidth") > 100, name
        if name == "speedup_vs_k":
            screenshot(page, tmp_path, "report-plot")
    broken = page.evaluate("Array.from(document.images).filter(i => !(i.complete && i.naturalWidth)).length")
    assert broken == 0

    assert open_results(page, report, "Summary") == 1
    page.locator("a[iconname=eye]").click()
    frame = page.frame_locator("iframe")
    assert frame.locator("table").first.locator("tr").count() == 3       # header, baseline, K=3
    assert "dflash" in frame.locator("table").first.inner_text()
    screenshot(page, tmp_path, "report-summary")

    launches = sorted(p.name for p in results.iterdir() if (p / "logs" / "server.json").exists())
    assert open_results(page, report, "Server launches") == len(launches) == 2
    for category in ("Environment", "Tiny pair"):
        assert open_results(page, report, category) == 1, category


# MLflow's compare view draws its metrics as two react-virtualized grids side by side (names, then one column
# per run) that render only the rows in view: a row is the cells at the same `top` in both. Returns the row's
# values in run order, or null after scrolling one step when the row is not drawn yet.
METRIC_ROW = """name => {
  // MLflow's compare view draws its metrics as two react-virtualized grids side by side (names, then one
  // column per run) that render only the rows in view; a row is the cells at the same `top` in both.
  const names = Array.from(document.querySelectorAll('a[title="Plot chart"]'));
  if (!names.length) return null;
  const box = names[0].closest('.ReactVirtualized__Grid').parentElement.parentElement;
  const grids = Array.from(box.querySelectorAll('.ReactVirtualized__Grid'));
  const link = names.find(a => a.textContent.trim() === name);
  if (!link) {
    for (const g of grids) { g.scrollTop += 135; g.dispatchEvent(new Event('scroll')); }
    return null;
  }
  const top = link.parentElement.style.top;
  return grids.filter(g => !g.contains(link)).flatMap(g => Array.from(g.querySelectorAll('[style]'))
    .filter(c => c.style.top === top && c.style.position === 'absolute').map(c => c.innerText.trim()));
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_ui(smoke, tmp_path):
    """A real `mlflow server` over the smoke study's store: its own log, stopped by its process group."""
    import httpx

    work, _ = smoke
    port = free_port()
    argv = [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{work.parent / 'results' / 'mlflow.db'}",
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    log = open(tmp_path / "mlflow-server.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy():
        assert proc.poll() is None, (tmp_path / "mlflow-server.log").read_text()[-2000:]
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, 120, "mlflow server /health")
        yield url
    finally:
        stop_group(proc.pid, proc, 20)
        log.close()


def test_mlflow_ui_lists_the_study_nested_and_compares_its_cells(smoke, mlflow_ui, page, tmp_path):
    from mlflow.tracking import MlflowClient

    work, _ = smoke
    client = MlflowClient(tracking_uri=f"sqlite:///{work.parent / 'results' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("specsweep")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`specsweep.study` = 'smoke'")
    children = [r for r in runs if r.data.tags.get("specsweep.kind") == "bench_cell"]
    spec_runs = [r for r in children if r.data.tags["method"] == "dflash"]
    assert {r.data.tags["method"] for r in children} == {"none", "dflash"} and len(spec_runs) == 2   # two repeats

    page.goto(f"{mlflow_ui}/#/experiments/{exp.experiment_id}/runs")
    parent = page.get_by_role("row").filter(has_text="smoke")
    parent.wait_for()
    assert page.get_by_role("row").filter(has_text="synthetic-t0").count() == 0     # nested: folded under it
    parent.get_by_role("button").first.click()                                      # unfold the study
    for child in children:
        page.get_by_role("row").filter(has_text=child.info.run_name).wait_for()
    assert page.get_by_role("row").filter(has_text="synthetic").count() >= 2         # the Dataset column
    screenshot(page, tmp_path, "mlflow-runs")

    spec = spec_runs[0]
    page.goto(f"{mlflow_ui}/#/experiments/{exp.experiment_id}/runs/{spec.info.run_id}")
    page.get_by_text("valid", exact=True).first.wait_for()
    text = page.locator("body").inner_text()
    for tag, value in (("method", "dflash"), ("dataset", "synthetic"), ("valid", "true")):
        assert spec.data.tags[tag] == value
        assert re.search(rf"\b{tag}\W*{value}\b", text), (tag, text[:3000])
    screenshot(page, tmp_path, "mlflow-run")

    ids = [r.info.run_id for r in spec_runs]
    page.goto(f"{mlflow_ui}/#/compare-runs?runs={json.dumps(ids)}&experiments={json.dumps([exp.experiment_id])}")
    page.get_by_text("Metrics", exact=True).last.scroll_into_view_if_needed()
    for _ in range(100):                     # scroll the metrics grid until the row is drawn
        row = page.evaluate(METRIC_ROW, "spec_decode.mean_acceptance_length")
        if row is not None:
            break
        page.wait_for_timeout(100)
    assert row is not None, "spec_decode.mean_acceptance_length is not in the compare view"
    want = [spec.data.metrics["spec_decode.mean_acceptance_length"] for spec in spec_runs]
    assert len(row) == 2 and all(float(got) == pytest.approx(w, rel=1e-3) for got, w in zip(row, want)), (row, want)
    screenshot(page, tmp_path, "mlflow-compare")
