"""What a person sees: the study's Snakemake report and the MLflow UI over the shared smoke study, opened in
headless Chromium (Debian's package, driven by Playwright). Screenshots go to the test's temp dir, and
also to $SPECSWEEP_SCREENSHOTS (e.g. docs/img) shrunk, which is how the README's pictures are made."""
import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers import claim_test_port, mlflow_server, snakemake, wait_for

from specsweep.read import tracking
from specsweep.run.server import stop_group

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


# MLflow's compare view draws its metrics as two react-virtualized grids side by side, the names and the values
# (one column per run), that render only the rows near the view: a row is the cells at the same `top` in both.
# The values grid scrolls (the wheel, as a user's) and the names grid follows it, one scroll event late.
# METRIC_ROW returns a row's values in run order once its name is in view, else null; METRIC_GRID is the
# centre of the values grid.
METRIC_ROW = """name => {
  const names = Array.from(document.querySelectorAll('a[title="Plot chart"]'));
  const link = names.find(a => a.textContent.trim() === name);
  if (!link) return null;
  const box = names[0].closest('.ReactVirtualized__Grid').parentElement.parentElement;
  const grids = Array.from(box.querySelectorAll('.ReactVirtualized__Grid'));
  const view = grids.find(g => g.contains(link)).getBoundingClientRect(), at = link.getBoundingClientRect();
  if (at.top < view.top || at.bottom > view.bottom) return null;
  const top = link.parentElement.style.top;
  const row = grids.filter(g => !g.contains(link)).flatMap(g => Array.from(g.querySelectorAll('[style]'))
    .filter(c => c.style.top === top && c.style.position === 'absolute').map(c => c.innerText.trim()));
  return row.length ? row : null;
}"""
METRIC_GRID = """() => {
  const names = Array.from(document.querySelectorAll('a[title="Plot chart"]'));
  if (!names.length) return null;
  const box = names[0].closest('.ReactVirtualized__Grid').parentElement.parentElement;
  const r = Array.from(box.querySelectorAll('.ReactVirtualized__Grid')).find(g => !g.contains(names[0]))
    .getBoundingClientRect();
  return {x: r.x + r.width / 2, y: r.y + r.height / 2};
}"""


# the axes of the compare view's parallel-coordinates plot, as MLflow's own ParallelCoordinatesPlotView finds them
AXIS_TITLES = ".pcp-plot .parcoords .y-axis .axis-heading .axis-title"


def metric_row(page, name: str) -> list[str] | None:
    """The compare view's values of one metric, wheeling its grid down until the row is in view (metrics are
    in name order: look them up in that order)."""
    for _ in range(400):
        row = page.evaluate(METRIC_ROW, name)
        if row:
            return row
        grid = page.evaluate(METRIC_GRID)
        if grid:
            page.mouse.move(grid["x"], grid["y"])
            page.mouse.wheel(0, 45)
        page.wait_for_timeout(150)
    return None


def close_assistant(page) -> None:
    """MLflow 3's assistant panel opens beside every page in a fresh profile; the screenshots leave it out."""
    close = page.locator('button[data-component-id="mlflow.assistant.chat_panel.close"]')
    if close.count():
        close.first.click()


# the toggle before a parent run's name in MLflow's runs table, which shows or hides its child runs
EXPAND = '[col-id="attributes.`Run Name`"] button[data-component-id*="runnamecellrenderer"]'
NAME_CELL = '[role=row][row-index] [role=gridcell][col-id="attributes.`Run Name`"]'


def study_row(study: str) -> str:
    return f"{study} · summary and plots"


def expand_studies(page) -> None:
    """Open every study's run onto its configurations, as a user clicks the toggle before each study's name."""
    page.get_by_role("row").filter(has_text="· summary and plots").first.wait_for()
    for row in page.get_by_role("row").filter(has_text="· summary and plots").all():
        toggle = row.locator(EXPAND)
        if toggle.count():
            toggle.first.click()
            page.wait_for_timeout(300)


def name_cells(page) -> list[dict]:
    """The runs table's Run Name cells in row order: each one's text and whether the column shows it whole."""
    return page.evaluate(f"""() => Array.from(document.querySelectorAll({NAME_CELL!r}))
      .map(c => ({{row: Number(c.closest('[row-index]').getAttribute('row-index')),
                  text: (c.querySelector('a') || c).innerText.trim(), whole: c.scrollWidth <= c.clientWidth + 1}}))
      .sort((a, b) => a.row - b.row)""")


@pytest.fixture(scope="module")
def verdict_store(tmp_path_factory):
    """Two studies with CIs (the verdict tests' fake sessions: K=3 and K=7 at set speedups, 2 repeats, 12 prompts;
    `w` with an A/A member), summarised and ingested into one SQLite store: no server, and figures the compare view
    can show. Gives the store, study v's folder and the link the last ingest printed. One per module: the MLflow UI
    tests only read it."""
    from test_verdicts import ingest_args, study, summarize

    from specsweep.read import tracking
    from specsweep.read.study import Study

    results = tmp_path_factory.mktemp("verdicts") / "results"
    for name, speeds, extra in (("v", {0: 1.0, 3: 1.4, 7: 1.8}, ()), ("w", {0: 1.0, 3: 1.2, 7: 0.8}, ("sweep.aa=true",))):
        grid = study(results, speeds, extra=extra, name=name)
        out = results / name
        summarize(grid, name)
        (out / "plots").mkdir()
        (out / "env.json").write_text("{}")
        record = tracking.ingest(Study.load(out, grid), *ingest_args(grid, name))
    return results / "mlflow.db", results / "v", record["url"]


@pytest.fixture(scope="module")
def mlflow_ui(verdict_store):
    """A real `mlflow server` over that store, one for the module's tests (each start took 10-20 s and each stop up
    to its 20 s grace on this machine): its own log beside the store, stopped by its process group."""
    import httpx

    db, *_ = verdict_store
    log_path = db.parent / "mlflow-server.log"
    port, claim = claim_test_port()
    log = open(log_path, "wb")
    proc = mlflow_server(port, "--backend-store-uri", f"sqlite:///{db}", stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def healthy():
        assert proc.poll() is None, log_path.read_text()[-2000:]
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
        claim.release()


def test_mlflow_ui_opens_on_one_run_per_configuration_and_compares_k3_with_k7(verdict_store, mlflow_ui, page,
                                                                              tmp_path):
    """What a user sees from the link ingest prints, in a fresh browser profile: the runs table (not MLflow
    3's GenAI overview), one run per configuration named like it, and the compare view of K=3 and K=7 with
    the paired speedup and its CI side by side, its default parallel-coordinates plot the speedup against K."""
    import csv

    from mlflow.tracking import MlflowClient

    from specsweep.read import tracking

    db, out, _ = verdict_store
    rows = list(csv.DictReader(open(out / "summary.csv")))
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("specsweep")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`specsweep.kind` = 'configuration' and "
                              "tags.`specsweep.read.study` = 'v'")
    names = {r.info.run_name for r in runs}
    assert len(runs) == len(rows) == 3 and {n.split(" · ")[0] for n in names} == {"baseline", "K=3", "K=7"}, names
    by_k = {r.data.tags["K"]: r for r in runs}

    page.goto(tracking.experiment_url(exp.experiment_id, mlflow_ui))     # the link ingest prints
    expand_studies(page)
    for name in names:                       # study w's baseline has the same name
        page.get_by_role("row").filter(has_text=name).first.wait_for()
    assert "/runs" in page.url and "overview" not in page.url and "workflowType=machine_learning" in page.url
    assert page.get_by_role("row").filter(has_text="v · summary and plots").count() == 1
    close_assistant(page)
    resize = page.locator('[role=columnheader][col-id="attributes.`Run Name`"] .ag-header-cell-resize')
    if resize.count():                       # the names in full: ag-grid sizes a column to fit on a double click
        resize.first.dblclick()
    screenshot(page, tmp_path, "mlflow-runs")

    k7 = by_k["7"]
    page.goto(f"{mlflow_ui}/#/experiments/{exp.experiment_id}/runs/{k7.info.run_id}?{tracking.WORKFLOW_QUERY}")
    page.get_by_text("verdict", exact=True).first.wait_for()
    text = page.locator("body").inner_text()
    for tag, value in (("method", "dflash"), ("K", "7"), ("verdict", "faster")):
        assert k7.data.tags[tag] == value
        assert re.search(rf"\b{tag}\W*{value}\b", text), (tag, text[:3000])

    pair = [by_k["3"], by_k["7"]]
    page.goto(tracking.compare_url([r.info.run_id for r in pair], exp.experiment_id, mlflow_ui))
    page.get_by_text("Metrics", exact=True).last.wait_for()
    close_assistant(page)
    # MLflow's default parallel-coordinates plot: the params the two runs differ in (K alone: params are each
    # configuration's own settings, no job_config) against the first metric they share (the e2e speedup, logged
    # first); mlflow_runs.py says why
    page.wait_for_function(f"() => document.querySelectorAll({AXIS_TITLES!r}).length >= 2", timeout=60000)
    axes = page.evaluate(f"() => Array.from(document.querySelectorAll({AXIS_TITLES!r})).map(t => t.textContent)")
    assert axes == ["server_spec.num_speculative_tokens", "speedup_e2e_geomean"], axes
    page.get_by_text("Metrics", exact=True).last.evaluate("e => e.scrollIntoView()")
    for metric in ("speedup_e2e_ci_high", "speedup_e2e_ci_low", "speedup_e2e_geomean"):
        row = metric_row(page, metric)
        assert row is not None, f"{metric} is not in the compare view"
        want = [float(next(x for x in rows if x["num_speculative_tokens"] == r.data.tags["K"])[metric])
                for r in pair]
        assert len(row) == 2 and all(float(got) == pytest.approx(w, rel=1e-3) for got, w in zip(row, want)), \
            (metric, row, want)
    # the names grid takes the values grid's previous scroll position: a 1-pixel step lines them up for the picture
    grid = page.evaluate(METRIC_GRID)
    page.mouse.move(grid["x"], grid["y"])
    page.wait_for_timeout(1000)
    page.mouse.wheel(0, 1)
    page.wait_for_timeout(1000)
    screenshot(page, tmp_path, "mlflow-compare")


def test_mlflow_ui_groups_each_study_and_shows_each_runs_k_speedup_and_verdict(verdict_store, mlflow_ui, page,
                                                                             tmp_path):
    """The link ingest prints, over a store of two studies (one with an A/A member), in a fresh browser profile:
    each study is one run with its configurations nested under it (MLflow's parent and child runs), and each
    configuration's name, read in the table without opening the run, starts with what differs (K, the concurrency)
    and holds its speedup with its CI and its verdict; the A/A member is named as one, and the baselines as such."""
    from mlflow.tracking import MlflowClient

    db, _, url = verdict_store
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("specsweep")
    runs = client.search_runs([exp.experiment_id])
    parents = {r.data.tags["specsweep.read.study"]: r for r in runs if r.data.tags["specsweep.kind"] == "study"}
    children = {s: [r for r in runs if r.data.tags.get("mlflow.parentRunId") == p.info.run_id]
                for s, p in parents.items()}
    assert sorted(parents) == ["v", "w"] and {s: len(c) for s, c in children.items()} == {"v": 3, "w": 4}
    leads = {r.info.run_name.split(" · ")[0] for r in children["w"]}
    assert leads == {"A/A baseline", "baseline", "K=3", "K=7"}, leads
    assert not any(r.info.run_name.startswith("A/A/") for r in runs)

    page.goto(url.replace(tracking.UI, mlflow_ui))
    expand_studies(page)
    close_assistant(page)
    resize = page.locator('[role=columnheader][col-id="attributes.`Run Name`"] .ag-header-cell-resize')
    if resize.count():
        resize.first.dblclick()
    want = sum(len(c) for c in children.values()) + len(parents)
    page.wait_for_function(f"() => document.querySelectorAll({NAME_CELL!r}).length >= {want}")
    cells = name_cells(page)
    screenshot(page, tmp_path, "mlflow-studies")
    texts = [c["text"] for c in cells]
    starts = sorted(texts.index(study_row(s)) for s in parents)
    assert len(texts) == want and starts[0] == 0, texts
    for a, b in zip(starts, starts[1:] + [len(texts)]):          # a study's row, then its configurations
        study = texts[a].split(" · ")[0]
        assert sorted(texts[a + 1:b]) == sorted(r.info.run_name for r in children[study]), (study, texts)
    for r in (r for c in children.values() for r in c):
        name, tags = r.info.run_name, r.data.tags
        cell = next(c for c in cells if c["text"] == name)
        assert cell["whole"], name
        if tags.get("K") and tags.get("method") == "dflash":
            assert name.startswith(f"K={tags['K']} · c={tags['concurrency']} · "), name
        if "speedup_e2e" in tags:                                   # every configuration but the baselines
            assert f"{tags['speedup_e2e']} {tags['verdict']}" in name, (name, tags)
        else:
            assert name.startswith("baseline · "), name
