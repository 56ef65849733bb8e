"""Headless Chromium (Debian's `chromium`) as the tests' reader of report.html: a screenshot, the page's
console messages and every network request the page made."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

_CONSOLE = re.compile(r":CONSOLE[:(\d)]*\]? ?(.*)$")
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0"]


def chromium() -> str:
    """The browser's path; skips without it on a developer machine, fails in CI (which installs it)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must render report.html in headless Chromium; `chromium` is not installed")
        pytest.skip("needs headless Chromium (Debian: apt-get install chromium)")
    return path


@dataclass
class Rendered:
    screenshot: np.ndarray      # H x W x 3, uint8
    console: list[str]          # console messages of the page (errors, warnings, logs)
    requests: list[str]         # URLs the page asked for beyond file: and data:


def render(page: Path, work: Path, size=(1200, 4000)) -> Rendered:
    """Load `page` in a fresh profile, take a screenshot, collect console messages and the page's requests.

    Any name lookup fails (host-resolver rules), so nothing leaves the machine; the net log still shows
    what the page tried to fetch."""
    from PIL import Image

    work.mkdir(parents=True, exist_ok=True)
    shot, netlog = work / "shot.png", work / "net.json"
    proc = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={work / 'profile'}", f"--log-net-log={netlog}",
                           f"--window-size={size[0]},{size[1]}", f"--screenshot={shot}", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-2000:]
    console = [m.group(1) for line in proc.stderr.splitlines() if (m := _CONSOLE.search(line))]
    return Rendered(np.asarray(Image.open(shot).convert("RGB")), console, page_requests(netlog))


def page_requests(netlog: Path) -> list[str]:
    """URLs requested on behalf of a file:// page (the browser's own background requests are not the page's)."""
    text = netlog.read_text()
    try:
        events = json.loads(text)["events"]
    except json.JSONDecodeError:  # a log cut short when the browser exits: close it
        events = json.loads(text.rstrip().rstrip(",") + "]}")["events"]
    urls = set()
    for event in events:
        params = event.get("params") or {}
        if "url" in params and str(params.get("network_isolation_key", "")).startswith("file://"):
            urls.add(params["url"])
    return sorted(u for u in urls if not u.startswith(("file:", "data:")))


def ink(image: np.ndarray) -> float:
    """Share of pixels that are not (near) white."""
    return float(np.mean(np.any(image < 235, axis=-1)))


def colours(image: np.ndarray) -> int:
    """Distinct colours, quantized to 32 levels per channel."""
    q = (image // 8).astype(np.int32).reshape(-1, 3)
    return len(np.unique((q[:, 0] << 10) | (q[:, 1] << 5) | q[:, 2]))
