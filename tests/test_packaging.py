"""The package as a user installs it: every data file the code opens is in the wheel, the C sources are
not, the build requirement reads the license field, and the native extensions are there wherever CI
requires them.

The data files are found in the code itself (its ``resources.files(PACKAGE).joinpath(...)`` calls and
jinja2 ``PackageLoader``s), not listed here, so a new data file that pyproject.toml does not ship fails.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from .helpers import NATIVE_REQUIRED, ROOT

PACKAGE = ROOT / "moeprof"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
NATIVE = ("moeprof.readers._xplane_native", "moeprof.insight.projection._replay_native")
WHEEL_ENV = "MOEPROF_TEST_WHEEL"  # a wheel already built (CI builds one): its file list, instead of building


def _package_of(node: ast.expr) -> str | None:
    """``PKG`` of ``resources.files("PKG")`` (or ``files("PKG")``), else None."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return str(node.args[0].value) if name == "files" else None


def _joined(call: ast.Call) -> tuple[str, list[ast.expr]] | None:
    """(package, the joinpath arguments in order) of ``files("PKG").joinpath(a).joinpath(b, c)``."""
    parts: list[ast.expr] = []
    node: ast.expr = call
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "joinpath":
        parts[:0] = node.args
        node = node.func.value
    package = _package_of(node)
    return (package, parts) if package is not None and parts else None


def code_data_paths() -> dict[str, str]:
    """Every data path the code opens, relative to ``moeprof/`` (a folder where the name is computed), and
    the module that opens it."""
    found: dict[str, str] = {}
    for module in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if not isinstance(node, ast.Call):
                continue
            where: tuple[str, list[ast.expr]] | None = None
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "PackageLoader" and len(node.args) == 2:
                package, folder = node.args  # jinja2.PackageLoader("moeprof.reports", "templates")
                if isinstance(package, ast.Constant):
                    where = (str(package.value), [folder])
            elif isinstance(func, ast.Attribute) and func.attr == "joinpath":
                outer = getattr(node, "_outer", False)
                where = None if outer else _joined(node)
                for arg in ast.walk(func.value):  # the inner joinpath calls of a chain are the same path
                    arg._outer = True  # type: ignore[attr-defined]
            if where is None:
                continue
            package, parts = where
            fixed = []
            for part in parts:
                if not isinstance(part, ast.Constant):
                    break  # computed from here on: every file of the folder so far may be opened
                fixed.append(str(part.value))
            base = PurePosixPath(*package.split(".")[1:])
            found[str(base.joinpath(*fixed))] = str(module.relative_to(ROOT))
    return found


def source_files(relative: str) -> list[str]:
    """The files a data path names in the source tree, relative to ``moeprof/``."""
    path = PACKAGE / relative
    if path.is_file():
        return [relative]
    assert path.is_dir(), f"{relative}: opened by the code but not in the source tree"
    return sorted(str(p.relative_to(PACKAGE)) for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_the_code_opens_the_data_files_we_know_of() -> None:
    """The scan finds the data files these modules are known to open (so an empty scan cannot pass)."""
    found = code_data_paths()
    assert found["core/taxonomy.toml"] in ("moeprof/core/classify.py", "moeprof/core/vocabulary.py")
    assert found["core/hardware.toml"] == "moeprof/core/hardware.py"
    assert found["insight/remedies.toml"] == "moeprof/insight/remedies.py"
    assert found["reports/assets"] == "moeprof/reports/html.py"  # joinpath("assets", name): the folder
    assert found["reports/templates"] == "moeprof/reports/html.py"


def test_package_data_ships_every_file_the_code_opens() -> None:
    """pyproject's package-data patterns cover every data file the code opens (no build needed)."""
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["moeprof"]
    for relative, module in code_data_paths().items():
        for file in source_files(relative):
            assert any(fnmatch.fnmatch(file, p) for p in patterns), f"{file} (opened by {module}) is not package data"


def test_the_build_requirement_reads_the_license_field() -> None:
    """``license = "SPDX"`` (PEP 639) is read from setuptools 77 on (older ones refuse the file): the build
    requirement says so, so that an isolated build fetches one that can."""
    license_field = PYPROJECT["project"]["license"]
    requires = PYPROJECT["build-system"]["requires"]
    setuptools = next(r for r in requires if re.match(r"setuptools\b", r))
    floor = re.search(r">=\s*(\d+)", setuptools)
    assert floor is not None, setuptools
    if isinstance(license_field, str):
        assert int(floor.group(1)) >= 77, f"{setuptools}: the SPDX license string needs setuptools>=77"


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The file list of the wheel ``pip wheel --no-deps .`` builds (or of ``$MOEPROF_TEST_WHEEL``)."""
    given = os.environ.get(WHEEL_ENV)
    if given:
        wheel = Path(given)
    else:
        # from a copy of what the build reads: a build in the checkout would reuse its build/ folder, whose
        # files an earlier build left there (a C source once shipped stays in build/lib)
        source = tmp_path_factory.mktemp("source")
        for name in ("pyproject.toml", "setup.py", "README.md"):
            shutil.copy2(ROOT / name, source / name)
        shutil.copytree(PACKAGE, source / "moeprof", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
        out = tmp_path_factory.mktemp("wheel")
        res = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        (wheel,) = out.glob("moeprof-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


@pytest.mark.slow
def test_the_wheel_holds_every_data_file_and_no_c_source(wheel_files: list[str]) -> None:
    """Built as a user builds it, the wheel holds every file the code opens and every extension's type stub;
    not the C sources (they build the extensions, which the wheel carries instead)."""
    shipped = {name.removeprefix("moeprof/") for name in wheel_files if name.startswith("moeprof/")}
    for relative, module in code_data_paths().items():
        for file in source_files(relative):
            assert file in shipped, f"{file} (opened by {module}) is not in the wheel"
    assert not [n for n in wheel_files if n.endswith(".c")], "C sources in the wheel"
    for name in NATIVE:
        stub = name.removeprefix("moeprof.").replace(".", "/") + ".pyi"
        assert stub in shipped, f"{stub} missing"
        built = [n for n in shipped if n.startswith(stub[:-4] + ".") and n.endswith((".so", ".pyd"))]
        if NATIVE_REQUIRED:
            assert built, f"{name}: not built into the wheel (MOEPROF_REQUIRE_NATIVE=1)"


@pytest.mark.skipif(not NATIVE_REQUIRED, reason="MOEPROF_REQUIRE_NATIVE is not set (no C compiler required)")
@pytest.mark.parametrize("name", NATIVE)
def test_native_extension_is_built_where_required(name: str) -> None:
    """Where CI requires the native kernels, both C extensions import: a failed build fails here, by name,
    instead of leaving the XPlane decoder or the replay on another route."""
    module = importlib.import_module(name)
    assert module.__file__ is not None and not module.__file__.endswith(".py")


LARGEST_TRACKED_FILE = 2 * 2**20  # the largest sample today is 1.1 MB; a clone should stay small


def test_no_tracked_file_is_large_or_named_like_an_option() -> None:
    """A stray output (a 51 MB pickle once landed as a file named ``--json``) makes every clone pay for it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [n for n in listed.decode().split("\0") if n]
    assert names, "git ls-files listed nothing"
    large = {n: size for n in names if (p := ROOT / n).is_file() and (size := p.stat().st_size) > LARGEST_TRACKED_FILE}
    assert not large, f"tracked files over {LARGEST_TRACKED_FILE} bytes: {large}"
    assert not [n for n in names if PurePosixPath(n).name.startswith("-")], "a tracked file named like an option"
