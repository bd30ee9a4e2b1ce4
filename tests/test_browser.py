"""What a person sees: the study's Snakemake report and the MLflow UI over the shared smoke study, opened in
headless Chromium (Debian's package, driven by Playwright). Screenshots go to the test's temp dir, and
also to $SPECSWEEP_SCREENSHOTS (e.g. docs/img) shrunk, which is how the README's pictures are made."""
import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, snakemake, wait_for

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


def test_report_shows_the_plots_and_the_summary_table(smoke, page, tmp_path):
    work, cfg = smoke
    report = work.parent / "results" / "smoke" / "report.html"
    out = snakemake(work, *cfg, "--report", str(report))
    assert out.returncode == 0 and report.exists(), out.stderr[-3000:]
    page.goto(report.as_uri())
    page.get_by_text("Plots", exact=False).first.click()
    pass
