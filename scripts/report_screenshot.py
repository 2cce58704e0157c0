"""The README's picture of a report's first screen, taken in headless Chromium (Playwright).

    make demo
    .venv/bin/python scripts/report_screenshot.py zoorank-demo/store/report/index.html \
        docs/images/report-first-screen.png

The page is opened from its file, at 1280 × 820 CSS pixels, and only what a user sees before
scrolling is kept. Needs Debian's ``chromium`` (the one the tests drive; ``.ci/run`` installs it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def screenshot(page: Path, out: Path, width: int = 1280, height: int = 820) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": width, "height": height})
            tab.goto(page.resolve().as_uri())
            tab.screenshot(path=str(out))
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("page", type=Path, help="the report's index.html")
    parser.add_argument("out", type=Path, help="the PNG to write")
    args = parser.parse_args()
    screenshot(args.page, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
