"""xterm.js for the monitor page, without committing third-party code.

The page needs five files of four npm packages, pinned here: `@xterm/xterm` (the terminal and
its stylesheet), `@xterm/addon-fit` (sizes the terminal to its box), `@xterm/addon-search`
(scrollback search) and `@xterm/addon-unicode11` (emoji and other wide characters take two
cells, as the programs' wcwidth says). Nothing of them is in the repository. Two ways to get
them to a browser:

- **A local copy** (preferred, and the only one that works offline): `fetch` asks npm for the
  pinned tarballs (`npm pack`), checks each against the pinned npm integrity (sha512 of the
  tarball) *and* against what the registry reports, takes the needed files out of it (read from
  the archive in memory: nothing else is extracted) and checks each against its pinned sha384,
  then writes them, with the packages' licences, into `trio_pty/ui/assets/vendor/` (ignored by
  git, included in the wheel when present). The server serves that copy at `/vendor/...`.
- **The public CDN**: when no valid local copy is there, `/vendor/...` answers with a redirect
  to the same versions on jsDelivr, and the page's `integrity` attributes (the sha384 values
  below) make the browser refuse anything else.

Both paths serve byte-identical files: the sha384 values are the Subresource Integrity hashes in
`assets/index.html` (a test checks they agree), so the browser verifies the local copy too.

Usage (stdlib only, so it runs before the project's dependencies are installed):

    python3 trio_pty/ui/vendor.py fetch [--dest DIR]   # needs npm; exit 1 on any mismatch
    python3 trio_pty/ui/vendor.py check [DIR]          # is DIR a valid copy? (exit 0/1)
    python3 trio_pty/ui/vendor.py pins                 # the pins, CDN URLs and SRI values

To move to new versions: change `version` and `integrity` (from `npm view NAME@VERSION
dist.integrity`), run `fetch --print-hashes`, which checks the tarballs but not the files and
prints each file's sha384, paste those here and into `assets/index.html`, and run the tests.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "CDN_BASE",
    "PACKAGES",
    "VENDOR_DIR",
    "VendorError",
    "VendorFile",
    "VendorPackage",
    "check_dir",
    "fetch",
    "main",
    "sri",
    "vendor_files",
]

VENDOR_DIR: Final = Path(__file__).resolve().parent / "assets" / "vendor"
CDN_BASE: Final = "https://cdn.jsdelivr.net/npm"
NPM_TIMEOUT: Final = 180.0  # seconds for one `npm pack` (it downloads the tarballs)


@dataclass(frozen=True)
class VendorFile:
    """One file of a package: where it is in the tarball, its name in the vendor folder (and
    under `/vendor/` on the server), and its pinned sha384 (the SRI value, base64)."""

    member: str
    name: str
    sha384: str
    content_type: str


@dataclass(frozen=True)
class VendorPackage:
    name: str
    version: str
    integrity: str  # npm's dist.integrity of the tarball
    files: tuple[VendorFile, ...]
    licence: str  # the name the package's LICENSE gets in the vendor folder

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    def cdn_url(self, file: VendorFile) -> str:
        return f"{CDN_BASE}/{self.spec}/{file.member}"


PACKAGES: Final[tuple[VendorPackage, ...]] = (
    VendorPackage(
        name="@xterm/xterm",
        version="5.5.0",
        integrity=(
            "sha512-hqJHYaQb5OptNunnyAnkHyM8aCjZ1MEIDTQu1iIbbTD/xops91NB5yq1ZK/dC2JDbVWtF23zUtl9"
            "JE2NqwT87A=="
        ),
        files=(
            VendorFile(
                "lib/xterm.js",
                "xterm.js",
                "M169f14mRZOXm3hD/v2Ti0ThIT/RnAQagXA9nlE15yHAtrW19gdePJh/HaTzUOe/",
                "text/javascript; charset=utf-8",
            ),
            VendorFile(
                "css/xterm.css",
                "xterm.css",
                "8Xk9wy/gzEDUKrXtrmCFa2bBuK3BpjpDuL/p0SeKQX19Khl/M+lHOgD/CyYf7efP",
                "text/css; charset=utf-8",
            ),
        ),
        licence="xterm.LICENSE",
    ),
    VendorPackage(
        name="@xterm/addon-fit",
        version="0.10.0",
        integrity=(
            "sha512-UFYkDm4HUahf2lnEyHvio51TNGiLK66mqP2JoATy7hRZeXaGMRDr00JiSF7m63vR5WKATF605yEg"
            "gJKsw0JpMQ=="
        ),
        files=(
            VendorFile(
                "lib/addon-fit.js",
                "addon-fit.js",
                "iF+jqbuti4XlB64clWgFWYEscb+UnSRv3VgVikGYZu+otNFnSHr7y7NcKfBnGizn",
                "text/javascript; charset=utf-8",
            ),
        ),
        licence="addon-fit.LICENSE",
    ),
    VendorPackage(
        name="@xterm/addon-search",
        version="0.15.0",
        integrity=(
            "sha512-ZBZKLQ+EuKE83CqCmSSz5y1tx+aNOCUaA7dm6emgOX+8J9H1FWXZyrKfzjwzV+V14TV3xToz1goI"
            "eRhXBS5qjg=="
        ),
        files=(
            VendorFile(
                "lib/addon-search.js",
                "addon-search.js",
                "86LmRYuuZvNbzjJ7gcFKXZcXi8YHqiuLVAz9ichptrEx0IfWHcH7XRjQWA7K1Q5c",
                "text/javascript; charset=utf-8",
            ),
        ),
        licence="addon-search.LICENSE",
    ),
    VendorPackage(
        name="@xterm/addon-unicode11",
        version="0.8.0",
        integrity=(
            "sha512-LxinXu8SC4OmVa6FhgwsVCBZbr8WoSGzBl2+vqe8WcQ6hb1r6Gj9P99qTNdPiFPh4Ceiu2pC8xuk"
            "Z6+2nnh49Q=="
        ),
        files=(
            VendorFile(
                "lib/addon-unicode11.js",
                "addon-unicode11.js",
                "7DkEj65mwuJpyTemyRshYB1TDCUcpXHiCcSt0agkXn8Zz8nOqajgB6EoeULHiS1O",
                "text/javascript; charset=utf-8",
            ),
        ),
        licence="addon-unicode11.LICENSE",
    ),
)


class VendorError(Exception):
    """A copy is missing, incomplete or does not match the pins; the message says which."""


def vendor_files() -> list[tuple[VendorPackage, VendorFile]]:
    return [(package, file) for package in PACKAGES for file in package.files]


def sri(data: bytes) -> str:
    """The base64 sha384 of `data` (an SRI value without its `sha384-` prefix)."""
    return base64.b64encode(hashlib.sha384(data).digest()).decode("ascii")


def _npm_integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")


def check_dir(directory: Path) -> dict[str, bytes]:
    """Read and verify every vendor file in `directory`: {name: content}. VendorError names
    the first file that is missing or differs from its pin."""
    contents: dict[str, bytes] = {}
    for package, file in vendor_files():
        path = directory / file.name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise VendorError(f"{path}: cannot read ({exc.strerror or exc})") from None
        if sri(data) != file.sha384:
            raise VendorError(
                f"{path} is not {package.spec}/{file.member} (sha384 {sri(data)}, pinned "
                f"{file.sha384})"
            )
        contents[file.name] = data
    return contents


def _npm_pack(specs: Sequence[str], workdir: Path) -> list[dict[str, object]]:
    npm = shutil.which("npm")
    if npm is None:
        raise VendorError("npm is not installed (the page will load xterm.js from the CDN)")
    command = [npm, "pack", *specs, "--json", "--ignore-scripts"]
    command += ["--pack-destination", str(workdir)]
    try:
        done = subprocess.run(
            command,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise VendorError(f"npm pack took more than {NPM_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        raise VendorError(f"npm pack failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    try:
        reports = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise VendorError(f"npm pack printed no JSON: {done.stdout[:500]!r}") from None
    if not isinstance(reports, list) or len(reports) != len(specs):
        raise VendorError(f"npm pack reported {reports!r}")
    return [dict(report) for report in reports]


def _members(tarball: bytes, wanted: Sequence[str]) -> dict[str, bytes]:
    """Read the named members (regular files only) of an npm tarball, in memory."""
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        for member in archive:
            name = member.name.removeprefix("package/")
            if name in wanted and member.isreg():
                handle = archive.extractfile(member)
                if handle is not None:
                    found[name] = handle.read()
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise VendorError(f"the tarball has no {', '.join(missing)}")
    return found


def fetch(dest: Path = VENDOR_DIR, *, verify_files: bool = True) -> dict[str, str]:
    """Fetch the pinned packages with npm and write their files into `dest`; returns each
    file's sha384. Everything is checked before anything is written."""
    outputs: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="trio-pty-vendor-") as tmp:
        workdir = Path(tmp)
        reports = _npm_pack([package.spec for package in PACKAGES], workdir)
        for package, report in zip(PACKAGES, reports, strict=True):
            filename = report.get("filename")
            if not isinstance(filename, str) or "/" in filename:
                raise VendorError(f"npm pack reported an odd file name: {filename!r}")
            tarball = (workdir / filename).read_bytes()
            actual = _npm_integrity(tarball)
            if actual != package.integrity:
                raise VendorError(
                    f"{package.spec}: the tarball's integrity is {actual}, pinned "
                    f"{package.integrity}"
                )
            if report.get("integrity") != package.integrity:
                raise VendorError(
                    f"{package.spec}: npm reports integrity {report.get('integrity')}, pinned "
                    f"{package.integrity}"
                )
            shasum = hashlib.sha1(tarball, usedforsecurity=False).hexdigest()
            if report.get("shasum") != shasum:
                raise VendorError(f"{package.spec}: npm reports shasum {report.get('shasum')}")
            wanted = [file.member for file in package.files] + ["LICENSE"]
            members = _members(tarball, wanted)
            for file in package.files:
                data = members[file.member]
                if verify_files and sri(data) != file.sha384:
                    raise VendorError(
                        f"{package.spec}/{file.member}: sha384 {sri(data)}, pinned {file.sha384}"
                    )
                outputs[file.name] = data
            outputs[package.licence] = members["LICENSE"]
    dest.mkdir(parents=True, exist_ok=True)
    for name, data in outputs.items():
        partial = dest / f".{name}.partial"
        partial.write_bytes(data)
        os.replace(partial, dest / name)
    return {name: sri(data) for name, data in outputs.items() if not name.endswith(".LICENSE")}


def _print_pins() -> None:
    for package, file in vendor_files():
        print(f"{package.spec}/{file.member}")
        print(f"  served at  /vendor/{file.name}")
        print(f"  CDN        {package.cdn_url(file)}")
        print(f"  integrity  sha384-{file.sha384}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 trio_pty/ui/vendor.py",
        description="Fetch and check the pinned xterm.js files of the monitor page.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fetch_cmd = commands.add_parser("fetch", help="fetch the pinned files with npm")
    fetch_cmd.add_argument("--dest", type=Path, default=VENDOR_DIR, help="target folder")
    fetch_cmd.add_argument(
        "--print-hashes",
        action="store_true",
        help="check the tarballs only and print the files' sha384 (to update the pins)",
    )
    check_cmd = commands.add_parser("check", help="verify a copy against the pins")
    check_cmd.add_argument("dir", nargs="?", type=Path, default=VENDOR_DIR)
    commands.add_parser("pins", help="print the pinned versions, CDN URLs and SRI values")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            hashes = fetch(args.dest, verify_files=not args.print_hashes)
            if args.print_hashes:
                for name, value in hashes.items():
                    print(f"{name}: sha384-{value}")
            else:
                names = ", ".join(package.spec for package in PACKAGES)
                print(f"fetched and verified {names} into {args.dest}")
        elif args.command == "check":
            check_dir(args.dir)
            print(f"{args.dir}: a valid copy of the pinned xterm.js files")
        else:
            _print_pins()
    except VendorError as exc:
        print(f"vendor: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
