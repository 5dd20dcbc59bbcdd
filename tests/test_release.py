"""The release: one version everywhere, a licence, a changelog and a citation file that
parse, and a wheel and an sdist that install and run outside the checkout.

The packaging test builds with the standard front end (``python -m build``: the sdist, then
the wheel from the sdist, so the sdist is complete) from a copy of the sources, installs the
wheel into a fresh venv in a temporary folder, and runs the main job and ``--version``
there. The venv reads numpy, mpi4py and the MPI library from this venv's site-packages
(a plain path in a ``.pth`` file, so this checkout's editable install is not seen): nothing
is downloaded and torch is not installed twice.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT

from mpi_teleport import __version__

# Every `python -m` command of the package (each answers --version without starting MPI).
COMMANDS = ("mpi_teleport.sim", "mpi_teleport.run", "mpi_teleport.launch",
            "mpi_teleport.trace", "mpi_teleport.checkpoint", "mpi_teleport.latency",
            "mpi_teleport.front.mpi_flavor")


def _python_env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


@pytest.mark.parametrize("module", COMMANDS)
def test_every_command_prints_the_packages_version(module):
    res = subprocess.run([sys.executable, "-m", module, "--version"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"python -m {module} {__version__}\n"
    assert res.stderr == ""


def test_the_version_is_one_number():
    """setup.cfg reads it from the package; CITATION.cff and the changelog's newest release
    agree with it (a dev version belongs to the Unreleased section)."""
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", __version__)
    assert "version = attr: mpi_teleport._version.__version__" in (ROOT / "setup.cfg").read_text()
    cff = _citation()
    assert str(cff["version"]) == __version__
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d\d-\d\d$",
                          (ROOT / "CHANGELOG.md").read_text(), re.M)
    if ".dev" in __version__:
        assert __version__.split(".dev")[0] not in released, \
            "a released version's number with .dev: bump _version.py after a release"
    else:
        assert released and released[0] == __version__, \
            "CHANGELOG.md's newest release is not the package's version"


def _citation() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))


def _authors_ok(authors) -> bool:
    return isinstance(authors, list) and authors and all(
        isinstance(a, dict) and (a.get("family-names") or a.get("name")) for a in authors)


def test_the_citation_file_is_cff_1_2():
    """The keys CFF 1.2.0 requires (cff-version, message, title, authors), and a
    preferred-citation of the paper with its own required keys (type, title, authors)."""
    cff = _citation()
    assert cff["cff-version"] == "1.2.0"
    assert isinstance(cff["message"], str) and cff["message"].strip()
    assert isinstance(cff["title"], str) and cff["title"].strip()
    assert _authors_ok(cff["authors"])
    assert cff["license"] == "MIT"
    paper = cff["preferred-citation"]
    assert paper["type"] in ("conference-paper", "article")
    assert paper["title"] == "Scalable Decentralized Learning with Teleportation"
    assert [a["family-names"] for a in paper["authors"]] == ["Takezawa", "Stich"]
    assert paper["year"] == 2025


def test_the_licence_is_mit_as_the_metadata_says():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "The mpi_teleport authors" in text
    assert re.search(r"^license = MIT$", (ROOT / "setup.cfg").read_text(), re.M)


def test_the_changelog_keeps_a_changelog():
    """Keep a Changelog: Unreleased on top, then the releases newest first, each dated, and
    only its kinds of section."""
    text = (ROOT / "CHANGELOG.md").read_text()
    heads = re.findall(r"^## (.*)$", text, re.M)
    assert heads[0] == "[Unreleased]"
    releases = [re.fullmatch(r"\[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d\d-\d\d)", h) for h in heads[1:]]
    assert releases and all(releases), f"a release heading is not '[X.Y.Z] - YYYY-MM-DD': {heads}"
    versions = [tuple(map(int, m.groups()[:3])) for m in releases]
    assert versions == sorted(versions, reverse=True)
    assert [m.group(4) for m in releases] == sorted((m.group(4) for m in releases), reverse=True)
    kinds = set(re.findall(r"^### (.*)$", text, re.M))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


# ---------------------------------------------------------------------------- packaging
SOURCES = ("mpi_teleport", "tests", "setup.cfg", "pyproject.toml", "README.md", "LICENSE",
           "MANIFEST.in", "CHANGELOG.md", "CITATION.cff", "constraints.txt")


def _copy_sources(dest: Path) -> Path:
    src = dest / "src"
    src.mkdir()
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "data", "in_rank")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=junk)
        else:
            shutil.copy2(ROOT / name, src / name)
    return src


def test_the_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    pytest.importorskip("build", reason="the test extra has it: pip install -c constraints.txt "
                                        "-e '.[test]'")
    src, dist = _copy_sources(tmp_path), tmp_path / "dist"
    # --no-isolation: this venv's setuptools builds it (offline; the build needs nothing else)
    res = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist),
                          str(src)], capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert [w.name for w in wheels] == [f"mpi_teleport-{__version__}-py3-none-any.whl"]
    assert [s.name for s in sdists] == [f"mpi_teleport-{__version__}.tar.gz"]
    import tarfile

    with tarfile.open(sdists[0]) as tar:
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"LICENSE", "CHANGELOG.md", "CITATION.cff", "mpi_teleport/DESIGN.md"} <= in_sdist
    with zipfile.ZipFile(wheels[0]) as whl:
        names = set(whl.namelist())
        metadata = whl.read(f"mpi_teleport-{__version__}.dist-info/METADATA").decode()
    assert "mpi_teleport/DESIGN.md" in names  # the design document the docstrings cite
    assert {f"mpi_teleport/examples/{p.name}" for p in (ROOT / "mpi_teleport" / "examples").glob("*.py")} <= names
    assert {str(p.relative_to(ROOT)) for p in (ROOT / "mpi_teleport").rglob("*.py")} <= names
    assert f"\nVersion: {__version__}\n" in metadata and "\nLicense: MIT\n" in metadata

    # A fresh venv outside the checkout; numpy, mpi4py and the MPI wheel from this one.
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    res = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                          "--no-deps", "--no-index", "-q", str(wheels[0])],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "this_checkouts_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = _python_env()
    env["PATH"] = os.pathsep.join([str(venv / "bin"), str(Path(sys.executable).parent), env["PATH"]])
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()

    def run(*args, timeout=180):
        return subprocess.run([str(python), *args], cwd=run_dir, env=env, capture_output=True,
                              text=True, timeout=timeout)

    where = run("-c", "import importlib.metadata as m, json, mpi_teleport as mt; "
                      "print(json.dumps([mt.__file__, mt.__version__, m.version('mpi_teleport')]))")
    assert where.returncode == 0, where.stderr
    file, version, dist_version = json.loads(where.stdout)
    assert Path(file).is_relative_to(venv) and version == dist_version == __version__
    res = run("-m", "mpi_teleport.launch", "--version")
    assert (res.returncode, res.stdout) == (0, f"python -m mpi_teleport.launch {__version__}\n")
    job = run("-m", "mpi_teleport.launch", "-n", "4", "--", "--rounds", "200")
    assert job.returncode == 0, job.stderr[-3000:]
    assert "Teleportation" in job.stdout and "Decentralized SGD" in job.stdout
    example = run("-m", "mpi_teleport.examples.logistic", "--rounds", "20")
    assert example.returncode == 0, example.stderr[-2000:]
    design = run("-c", "import importlib.resources as r; "
                       "print(len(r.files('mpi_teleport').joinpath('DESIGN.md').read_text()))")
    assert design.returncode == 0 and int(design.stdout) > 10_000
