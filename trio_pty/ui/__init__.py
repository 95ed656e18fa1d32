"""The PTY monitor: a static web page served by `trio-pty serve` next to `/rpc`.

`assets/` holds the page (HTML, one script, one stylesheet, an icon: no build step, no
framework). xterm.js is not in the repository: `vendor.py` fetches the pinned files into
`assets/vendor/`, and `load_site` serves that copy when it is there and valid, or else
redirects `/vendor/...` to the same versions on the CDN (the page's SRI hashes make the
browser check either). See docs/monitor.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

import attrs

from trio_pty.server.http import Site, StaticFile
from trio_pty.ui.vendor import PACKAGES, VENDOR_DIR, VendorError, check_dir

__all__ = ["ASSETS_DIR", "PAGE_FILES", "AssetsError", "Page", "load_page"]

log = logging.getLogger("trio_pty.ui")

ASSETS_DIR: Final = Path(__file__).resolve().parent / "assets"

# URL path -> (file in assets/, content type). Nothing else is served.
PAGE_FILES: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/monitor.js": ("monitor.js", "text/javascript; charset=utf-8"),
    "/monitor.css": ("monitor.css", "text/css; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}


class AssetsError(ValueError):
    """`--ui-assets DIR` is not a valid copy of the pinned xterm.js files, or the page's own
    files are missing (a broken installation)."""


@attrs.frozen
class Page:
    """The loaded site and where its xterm.js comes from (`local` or `cdn`)."""

    site: Site
    xterm: str
    xterm_dir: Path | None = None

    def describe(self) -> str:
        if self.xterm == "local":
            return f"the monitor page's xterm.js is served from {self.xterm_dir}"
        return (
            "the monitor page's xterm.js loads from the CDN (no local copy; "
            "run `python3 trio_pty/ui/vendor.py fetch` with npm to serve one)"
        )


def load_page(ui_assets: str | Path | None = None) -> Page:
    """Read the page and xterm.js once (start-up). With `ui_assets`, that folder must hold a
    valid copy (AssetsError otherwise); without, the packaged copy is used when valid, and
    the CDN otherwise."""
    files: dict[str, StaticFile] = {}
    for path, (name, content_type) in PAGE_FILES.items():
        try:
            body = (ASSETS_DIR / name).read_bytes()
        except OSError as exc:
            raise AssetsError(f"the page's {name} is missing: {exc.strerror or exc}") from None
        files[path] = StaticFile(body, content_type)
    if ui_assets is not None:
        directory = Path(ui_assets).expanduser().resolve()
        try:
            vendored = check_dir(directory)
        except VendorError as exc:
            raise AssetsError(f"--ui-assets: {exc}") from None
    else:
        directory = VENDOR_DIR
        try:
            vendored = check_dir(directory)
        except VendorError as exc:
            if directory.exists():
                log.warning("ignoring the local xterm.js copy: %s", exc)
            vendored = {}
    redirects: dict[str, str] = {}
    scripts: list[str] = []
    styles: list[str] = []
    for package in PACKAGES:
        for file in package.files:
            path = f"/vendor/{file.name}"
            if vendored:
                files[path] = StaticFile(vendored[file.name], file.content_type)
            else:
                url = package.cdn_url(file)
                redirects[path] = url
                (styles if file.name.endswith(".css") else scripts).append(url)
    site = Site(
        files=files,
        redirects=redirects,
        script_sources=tuple(scripts),
        style_sources=tuple(styles),
    )
    if vendored:
        return Page(site, "local", directory)
    return Page(site, "cdn")
