#!/usr/bin/env python3
"""Write the Warp capture fixtures with every release that has APIC capture before 1.19.

Warp saves captured graphs (``wp.capture_save``) since warp-lang 1.13.0; each release writes one APIC
format version and reads only its own (1.19 writes 18; see docs/FORMAT.md for the table). For every
release this makes a virtual environment in ``target/wrp-venvs/<version>`` (kept and reused: each is
about 400 MB), installs that warp-lang from PyPI into it, and runs ``generate.py --out
tests/wrp/warp-<version>`` with it, on the CPU (no GPU is needed, and none is used). What a release
cannot write is listed under ``not_written`` in that folder's ``manifest.json``.

    python3 tests/wrp/generate_versions.py            # every release
    python3 tests/wrp/generate_versions.py 1.14.0     # one
"""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RELEASES = ["1.13.0", "1.14.0", "1.15.0", "1.16.0", "1.17.0", "1.18.0"]


def venv(version: str) -> str:
    path = os.path.join(ROOT, "target", "wrp-venvs", version)
    python = os.path.join(path, "bin", "python")
    if subprocess.run([python, "-c", "import warp"], capture_output=True).returncode if os.path.exists(python) else 1:
        subprocess.run([sys.executable, "-m", "venv", path], check=True)
        # numpy below 2.3: the oldest releases predate it.
        subprocess.run([python, "-m", "pip", "install", "-q", f"warp-lang=={version}", "numpy<2.3"], check=True)
    return python


def main() -> None:
    for version in sys.argv[1:] or RELEASES:
        out = os.path.join(HERE, f"warp-{version}")
        print(f"== warp-lang {version} -> {os.path.relpath(out, ROOT)}", flush=True)
        subprocess.run([venv(version), os.path.join(HERE, "generate.py"), "--out", out], check=True)


if __name__ == "__main__":
    main()
