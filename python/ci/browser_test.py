"""The report's attention viewer, driven in headless Chromium.

Opens a report (a run's or `mechlab reproduce`'s ``report.html``), and for every
attention viewer on it: picks a head, hovers a query token, and checks that the
weights the page shows (each key token's ``data-w`` and its shading) are the
ones in the run's ``activations.safetensors`` for that hook, head, sequence and
query; then holds a token with a click and checks that it stays. It also checks
that the page raised no script errors, and that without JavaScript the static
heatmap and the note are shown instead. ``--screenshot`` saves the first viewer.

On a ``mechlab reproduce`` report (a ``summary.json`` with ``claims`` beside it),
it also checks the first screen, a 1280 × 800 window as it opens: every claim that
did not hold (failed, or a finding) is named there with its reason, and the runs'
own sections are folded.

Needs Chromium and ChromeDriver (Debian: ``apt-get install chromium
chromium-driver``), selenium and numpy. Exits 77 with a message when the browser
is missing, so that CI can say it skipped rather than fail.

    python python/ci/browser_test.py runs/reproduce/report.html --screenshot shot.png
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def load_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file (f64 or f32), by name."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F64": "<f8", "F32": "<f4", "I64": "<i8"}[info["dtype"]]
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype=dtype).reshape(info["shape"])
    return out


def browser(profile: str, javascript: bool = True, size: tuple[int, int] = (1100, 1400)) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    # This machine's network is closed: without the background-networking flags
    # Chromium keeps trying to reach Google's hosts.
    for a in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--window-size={size[0]},{size[1]}",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    if not javascript:
        opts.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def rgba_alpha(css: str) -> float:
    """The alpha of a computed `rgb(...)` / `rgba(...)` colour."""
    parts = css[css.index("(") + 1 : css.index(")")].split(",")
    return float(parts[3]) if len(parts) == 4 else 1.0


def check_viewer(driver: Any, fig: Any, report_dir: Path, index: int) -> str:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    data = json.loads(
        fig.find_element(By.CSS_SELECTOR, "script.attn-data").get_attribute("textContent")
    )
    name = fig.get_attribute("id")
    view = fig.find_element(By.CSS_SELECTOR, ".attn-view")
    assert view.is_displayed(), f"{name}: the viewer did not start"
    assert not fig.find_element(By.CSS_SELECTOR, ".attn-still").is_displayed(), name
    src = data.get("source")
    assert src, f"{name}: the viewer names no activation file"
    acts = load_safetensors(report_dir / src["file"])
    tokens, queries = data["tokens"], data["query_tokens"] or data["tokens"]
    nk, nq = len(tokens), len(queries)
    self_attention = not data["query_tokens"]

    # The last head (or the first, when the viewer opens on the last) and a
    # query in the middle.
    h = len(data["heads"]) - 1 if data.get("first_head", 0) != len(data["heads"]) - 1 else 0
    head = data["heads"][h]
    q = nq // 2 if nq > 1 else 0
    buttons = fig.find_elements(By.CSS_SELECTOR, "button.attn-head")
    assert len(buttons) == len(data["heads"]), name
    first = data.get("first_head", 0)
    assert buttons[first].get_attribute("aria-pressed") == "true", f"{name}: opens on the wrong head"
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", fig)
    buttons[h].click()
    assert buttons[h].get_attribute("aria-pressed") == "true", name
    keys = fig.find_elements(By.CSS_SELECTOR, ".attn-keys .attn-tok")
    qspans = keys if self_attention else fig.find_elements(By.CSS_SELECTOR, ".attn-queries .attn-tok")
    assert len(keys) == nk and len(qspans) == nq, name
    ActionChains(driver).move_to_element(qspans[q]).perform()

    shown = np.array([float(k.get_attribute("data-w")) for k in keys])
    want = acts[head["hook"]][src["batch"], head["head"], q, :nk].astype(np.float64)
    err = float(np.max(np.abs(shown - want)))
    assert err <= 1e-12, f"{name}: {head['name']} query {q}: page {shown} vs file {want}"
    assert "attn-current" in qspans[q].get_attribute("class"), name
    # The strongest key is shaded fully, a key with no weight not at all.
    top = int(np.argmax(want))
    assert rgba_alpha(keys[top].value_of_css_property("background-color")) > 0.99, name
    if want.min() == 0.0:
        zero = int(np.argmin(want))
        assert rgba_alpha(keys[zero].value_of_css_property("background-color")) < 0.01, name
    info = fig.find_element(By.CSS_SELECTOR, ".attn-info").text
    assert head["name"] in info and f"@{top}" in info, f"{name}: {info}"

    # Hold the query with a click; moving to another token leaves it in place.
    qspans[q].click()
    other = 0 if q != 0 else nq - 1
    ActionChains(driver).move_to_element(qspans[other]).perform()
    held = np.array([float(k.get_attribute("data-w")) for k in keys])
    assert np.array_equal(held, shown), f"{name}: a held query moved"
    assert "held" in fig.find_element(By.CSS_SELECTOR, ".attn-info").text, name
    qspans[q].click()
    ActionChains(driver).move_to_element(qspans[other]).perform()
    if other != q and nq > 1:
        moved = np.array([float(k.get_attribute("data-w")) for k in keys])
        want2 = acts[head["hook"]][src["batch"], head["head"], other, :nk]
        assert np.max(np.abs(moved - want2)) <= 1e-12, f"{name}: released query did not follow"
    slid = check_slider(driver, fig, data, h, q, keys, qspans)
    return (
        f"viewer {index} ({name}): {head['name']} query {q} {queries[q]!r}: "
        f"{nk} weights match {src['file']} (max |diff| {err:.1e}); hold and release work{slid}"
    )


def check_slider(driver: Any, fig: Any, data: dict[str, Any], h: int, q: int, keys: Any, qspans: Any) -> str:
    """A viewer over checkpoints: each slider position shows that checkpoint's
    weights (from the figure's data, checked against the checkpoints by the Rust
    tests), and the last position the viewer's own."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    history = data.get("history") or []
    if not history:
        return ""
    name = fig.get_attribute("id")
    slider = fig.find_element(By.CSS_SELECTOR, "input.attn-slider")
    assert slider.get_attribute("value") == str(len(history)), f"{name}: opens before the last checkpoint"
    nk = len(data["tokens"])
    nq = len(data["query_tokens"] or data["tokens"])
    pats = [c["pattern"] for c in history] + [data["pattern"]]
    steps = [c["step"] for c in history] + [data["step"]]
    for at in (0, len(history) // 2, len(history)):
        driver.execute_script(
            "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))",
            slider,
            str(at),
        )
        ActionChains(driver).move_to_element(qspans[q]).perform()
        shown = np.array([float(k.get_attribute("data-w")) for k in keys])
        want = np.array(pats[at][(h * nq + q) * nk : (h * nq + q + 1) * nk])
        assert np.array_equal(shown, want), f"{name}: step {steps[at]}: page {shown} vs data {want}"
        assert fig.get_attribute("data-step") == str(steps[at]), name
        assert f"step {steps[at]}" in fig.find_element(By.CSS_SELECTOR, ".attn-info").text, name
    return f"; the slider shows {len(steps)} checkpoints (steps {steps[0]} to {steps[-1]})"


def open_folds(driver: Any) -> None:
    """Opens every folded section as a reader would, by clicking its summary
    (a native toggle: it works without JavaScript too)."""
    from selenium.webdriver.common.by import By

    for s in driver.find_elements(By.CSS_SELECTOR, "details > summary"):
        s.click()


def check_first_screen(report: Path) -> str:
    """Every claim that did not hold is on the first screen, with its reason."""
    from selenium.webdriver.common.by import By

    summary = json.loads((report.parent / "summary.json").read_text())
    claims = summary.get("claims")
    if claims is None:
        return "first screen: not a reproduce report"
    pending = [c for c in claims if c["status"] != "held"]
    with tempfile.TemporaryDirectory() as profile:
        driver = browser(profile, size=(1280, 800))
        try:
            driver.get(report.as_uri())
            height = driver.execute_script("return window.innerHeight")
            badge = driver.find_element(By.CSS_SELECTOR, "header .summary .badge")
            failed = [c for c in claims if c["status"] == "failed"]
            assert ("FAILED" in badge.text) == bool(failed), f"badge {badge.text!r}, {len(failed)} failed"
            table = driver.find_element(By.CSS_SELECTOR, "section#s1 table")
            rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
            for c in pending:
                # a failure with its reason; a finding with both rates
                why = c["reason"][:40] if c["status"] == "failed" else f"{c['passed']}/{c['seeds']}"
                cells = [r for r in rows if c["id"] in r.text and why in r.text]
                assert cells, f"{c['id']} ({c['status']}) is not in the first table with {why!r}"
                top = driver.execute_script("return arguments[0].getBoundingClientRect().bottom", cells[0])
                assert top <= height, f"{c['id']}: its row ends at {top} px, below the first screen ({height} px)"
            folded = driver.find_elements(By.CSS_SELECTOR, "section details:not([open])")
            assert folded, "the runs' sections are not folded"
        finally:
            driver.quit()
    return f"first screen: {len(pending)} claims that did not hold, each named with its reason; {len(folded)} sections folded"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("--screenshot", type=Path, help="save the first viewer as PNG")
    ap.add_argument("--min-viewers", type=int, default=1)
    ap.add_argument(
        "--figure", help="the viewer to screenshot, by figure id (default: the first)"
    )
    ap.add_argument("--head", help="the head to screenshot, by name (e.g. L1H0)")
    ap.add_argument(
        "--token", type=int, help="the token position to hover for the screenshot (default: the last but one)"
    )
    args = ap.parse_args()
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        print(f"browser test skipped: {', '.join(missing)} not installed", file=sys.stderr)
        return 77
    from selenium.webdriver.common.by import By

    report = args.report.resolve()
    url = report.as_uri()
    with tempfile.TemporaryDirectory() as profile:
        driver = browser(profile)
        try:
            driver.get(url)
            open_folds(driver)
            figs = driver.find_elements(By.CSS_SELECTOR, "figure.attn")
            assert len(figs) >= args.min_viewers, (
                f"{report}: {len(figs)} attention viewers, expected at least {args.min_viewers}"
            )
            for i, fig in enumerate(figs):
                print(check_viewer(driver, fig, report.parent, i))
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert not errors, f"script errors: {errors}"
            if args.screenshot:
                pick = figs[0]
                if args.figure:
                    pick = driver.find_element(By.ID, args.figure)
                driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", pick)
                view = pick.find_element(By.CSS_SELECTOR, ".attn-view")
                from selenium.webdriver.common.action_chains import ActionChains

                if args.head:
                    named = [
                        b
                        for b in pick.find_elements(By.CSS_SELECTOR, "button.attn-head")
                        if b.get_attribute("title").startswith(args.head + ":")
                    ]
                    assert named, f"no head {args.head} in {pick.get_attribute('id')}"
                    named[0].click()
                toks = pick.find_elements(By.CSS_SELECTOR, ".attn-keys .attn-tok")
                at = args.token if args.token is not None else max(0, len(toks) - 2)
                ActionChains(driver).move_to_element(toks[at]).perform()
                args.screenshot.parent.mkdir(parents=True, exist_ok=True)
                view.screenshot(str(args.screenshot))
                print(f"screenshot: {args.screenshot}")
        finally:
            driver.quit()
    with tempfile.TemporaryDirectory() as profile:
        driver = browser(profile, javascript=False)
        try:
            driver.get(url)
            open_folds(driver)
            for fig in driver.find_elements(By.CSS_SELECTOR, "figure.attn"):
                still = fig.find_element(By.CSS_SELECTOR, ".attn-still svg")
                assert still.is_displayed(), "without JavaScript the still is hidden"
                assert fig.find_element(By.CSS_SELECTOR, ".attn-nojs").is_displayed()
                assert not fig.find_element(By.CSS_SELECTOR, ".attn-view").is_displayed()
            print("without JavaScript: every viewer shows its still heatmap and note")
        finally:
            driver.quit()
    print(check_first_screen(report))
    print(f"browser test passed: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
