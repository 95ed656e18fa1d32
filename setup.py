"""Build hook: put a verified copy of xterm.js into the package when npm is available.

Everything else about the build is in pyproject.toml. The monitor page works without the copy
(it then loads the same pinned files from a CDN, checked by Subresource Integrity), so a
failed or impossible fetch is reported and the build goes on.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _fetch_xterm() -> None:
    spec = importlib.util.spec_from_file_location("_vendor", HERE / "trio_pty/ui/vendor.py")
    if spec is None or spec.loader is None or shutil.which("npm") is None:
        return
    vendor = importlib.util.module_from_spec(spec)
    sys.modules["_vendor"] = vendor
    spec.loader.exec_module(vendor)
    try:
        vendor.check_dir(vendor.VENDOR_DIR)
    except Exception:
        try:
            vendor.fetch()
        except Exception as exc:  # the CDN fallback still works
            print(f"trio-pty: xterm.js not fetched ({exc}); the page will use the CDN")


class BuildWithAssets(build_py):
    def run(self) -> None:
        _fetch_xterm()
        super().run()


setup(cmdclass={"build_py": BuildWithAssets})
