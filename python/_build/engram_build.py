"""The package's PEP 517 build backend, standard library only.

It builds the pure-Python wheel (and an sdist, and an editable wheel) with ``zipfile``, so that
``pip install --no-build-isolation ./python`` works offline in any virtual environment, whatever setuptools and
wheel it has or lacks (a venv of Python 3.11 has setuptools without ``bdist_wheel``; one of 3.12 has none).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "engram_host"
PROJECT = "engram-host"
SUMMARY = "Python client of engram-host: Engram tables as zero-copy PyTorch tensors"
TAG = "py3-none-any"


def _version() -> str:
    with open(os.path.join(ROOT, PACKAGE, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError(f"no __version__ in {PACKAGE}/__init__.py")
    return m.group(1)


def _dist_info() -> str:
    return f"{PACKAGE}-{_version()}.dist-info"


def _metadata() -> bytes:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    lines = ["Metadata-Version: 2.1", f"Name: {PROJECT}", f"Version: {_version()}", f"Summary: {SUMMARY}",
             "Requires-Python: >=3.10", "Provides-Extra: torch", 'Requires-Dist: torch; extra == "torch"',
             "Provides-Extra: numpy", 'Requires-Dist: numpy; extra == "numpy"',
             "Description-Content-Type: text/markdown", "", readme]
    return "\n".join(lines).encode("utf-8")


def _wheel_file() -> bytes:
    return f"Wheel-Version: 1.0\nGenerator: engram_build\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode()


def _package_files() -> list:
    """(archive name, path) of every .py file of the package, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                out.append((os.path.relpath(path, ROOT).replace(os.sep, "/"), path))
    return out


def _write_wheel(wheel_directory: str, files: list) -> str:
    """files: (archive name, bytes). Adds the dist-info and RECORD; returns the wheel's file name."""
    dist_info = _dist_info()
    files = files + [(f"{dist_info}/METADATA", _metadata()), (f"{dist_info}/WHEEL", _wheel_file())]
    record = []
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    wheel_name = f"{PACKAGE}-{_version()}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
        z.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", (2020, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return wheel_name


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None) -> list:
    return []


def get_requires_for_build_sdist(config_settings=None) -> list:
    return []


def get_requires_for_build_editable(config_settings=None) -> list:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings=None) -> str:
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "wb") as f:
        f.write(_metadata())
    with open(os.path.join(d, "WHEEL"), "wb") as f:
        f.write(_wheel_file())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings=None, metadata_directory=None) -> str:
    return _write_wheel(wheel_directory, [(name, _read(path)) for name, path in _package_files()])


def build_editable(wheel_directory: str, config_settings=None, metadata_directory=None) -> str:
    """A wheel whose .pth file puts this directory on sys.path: edits take effect without reinstalling."""
    return _write_wheel(wheel_directory, [(f"_{PACKAGE}_editable.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings=None) -> str:
    base = f"{PACKAGE}-{_version()}"
    name = f"{base}.tar.gz"
    members = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")), ("README.md", os.path.join(ROOT, "README.md")),
               ("_build/engram_build.py", os.path.abspath(__file__))] + _package_files()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        pkg_info = _metadata()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        tar.addfile(info, io.BytesIO(pkg_info))
        for arcname, path in members:
            tar.add(path, arcname=f"{base}/{arcname}")
    return name
