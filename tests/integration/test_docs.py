"""The documentation site: it builds with warnings as errors, its API reference covers every
public name, and every code example on it runs.

Examples: each page's fenced blocks run in order, as one Python script in a fresh
directory (conventions in docs/about.md):
- ```` ```python ```` runs; ```` ```bash ```` runs through ``bash -e`` at that point;
- ```` ```python title="train.py" ```` is written to ``train.py`` instead (a later bash
  block runs it);
- ``<!-- docs-test: skip REASON -->`` on the line before a fence leaves that block out;
- ``<!-- docs-test: gpu -->`` runs that block only where CUDA is (the ``gpu``-marked test
  runs such pages whole on the device machine; elsewhere the block is left out).
The environment is a user's: this venv's ``bin`` first on PATH, S3 credentials and
``AWS_ENDPOINT_URL`` pointing at the tests' SeaweedFS (bucket ``my-bucket``) for pages that
use ``s3://``, and torchrun's variables for a one-process world.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from remote_servers import S3Server, free_ports

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
BUCKET = "my-bucket"
PUBLIC_MODULES = [
    "conveyor",
    "conveyor.collate",
    "conveyor.dataloader",
    "conveyor.datapipes",
    "conveyor.datapipes.iter",
    "conveyor.datapipes.map",
    "conveyor.dataset",
    "conveyor.distributed",
    "conveyor.formats",
    "conveyor.graph",
    "conveyor.graph_settings",
    "conveyor.integrations",
    "conveyor.sampler",
    "conveyor.state",
    "conveyor.stateful_dataloader",
    "conveyor.stateful_dataloader.sampler",
    "conveyor.stats",
    "conveyor.storage",
    "conveyor.text",
    "conveyor.vision",
]
"""Modules users import by path; every name in their ``__all__`` must be documented."""

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)(?P<info>[^\n`]*)$")
_TITLE = re.compile(r'title="(?P<title>[^"]+)"')
_SKIP = re.compile(r"^\s*<!-- docs-test: skip\b.*-->\s*$")
_GPU = re.compile(r"^\s*<!-- docs-test: gpu\b.*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    lang: str
    code: str
    line: int  # of the block's first code line, 1-based
    title: str | None
    skipped: bool
    gpu: bool = False  # runs only where CUDA is


def blocks_of(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found = []
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        indent = len(match["indent"])
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = "\n".join(line[indent:] for line in lines[index + 1 : end])
        title = _TITLE.search(match["info"])
        skipped = index > 0 and _SKIP.match(lines[index - 1]) is not None
        gpu = index > 0 and _GPU.match(lines[index - 1]) is not None
        found.append(
            Block(match["lang"], body, index + 2, title["title"] if title else None, skipped, gpu)
        )
        index = end + 1
    return found


def page_script(page: Path, gpu: bool = False) -> str | None:
    """One Python script running the page's examples in order (None: nothing to run);
    ``gpu``: with the blocks that need CUDA."""
    name = page.relative_to(ROOT).as_posix()
    steps = []
    for block in blocks_of(page):
        if block.skipped or (block.gpu and not gpu) or block.lang not in ("python", "bash"):
            continue
        if block.title is not None:
            steps.append(f"_docs_write({block.title!r}, {block.code + chr(10)!r})")
        elif block.lang == "python":
            padded = "\n" * (block.line - 1) + block.code
            steps.append(f"exec(compile({padded!r}, {name!r}, 'exec'), globals())")
        else:
            steps.append(f"_docs_bash({block.code!r}, {f'{name}:{block.line}'!r})")
    if not steps:
        return None
    prelude = """
import pathlib as _docs_pathlib, subprocess as _docs_subprocess

def _docs_write(path, text):
    _docs_pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    _docs_pathlib.Path(path).write_text(text)

def _docs_bash(script, where):
    done = _docs_subprocess.run(["bash", "-e", "-c", script])
    if done.returncode:
        raise SystemExit(f"bash block at {where} exited with {done.returncode}")
"""
    return prelude + "\n".join(steps) + "\n"


def example_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if page_script(p) is not None)


def _make_bucket(s3: S3Server) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options)
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    release = getattr(type(fs), "close_session", None)
    if release is not None and getattr(fs, "_s3creator", None) is not None:
        release(fs.loop, fs._s3creator)


@pytest.fixture(scope="module")
def s3_environment(s3_server: S3Server) -> dict[str, str]:
    """A user's S3 settings for the tests' SeaweedFS, with ``my-bucket`` created (once,
    before any test's leak guard starts counting)."""
    _make_bucket(s3_server)
    return {
        "AWS_ACCESS_KEY_ID": s3_server.storage_options["key"],
        "AWS_SECRET_ACCESS_KEY": s3_server.storage_options["secret"],
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def run_page(page: Path, directory: Path, extra_env: dict[str, str], gpu: bool = False) -> None:
    script = page_script(page, gpu)
    assert script is not None
    (directory / "docs_page.py").write_text(script)
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    # this checkout's conveyor and nothing else of the caller's path: installed (editable) or
    # not (scripts/gpu_check.sh runs it from src/ with the GPU machine's own python3)
    env["PYTHONPATH"] = str(ROOT / "src")
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_ports(1)[0]), RANK="0",
               LOCAL_RANK="0", WORLD_SIZE="1", **extra_env)  # fmt: skip
    done = subprocess.run(
        [sys.executable, "docs_page.py"],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    print(done.stdout)  # shown with pytest -s
    assert done.returncode == 0, f"{page}:\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"


def _uses_s3(page: Path) -> bool:
    return "s3://" in (page_script(page) or "")


def _page_id(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", [p for p in example_pages() if not _uses_s3(p)], ids=_page_id)
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path, {})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", [p for p in example_pages() if _uses_s3(p)], ids=_page_id)
def test_page_examples_run_against_s3(
    page: Path, tmp_path: Path, s3_environment: dict[str, str]
) -> None:
    run_page(page, tmp_path, s3_environment)


def test_block_parser_reads_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```python\nx = 1\n```\n<!-- docs-test: skip needs a GPU -->\n```python\n"
        'y = 2\n```\n```python title="t.py"\nprint(1)\n```\n  ```bash\n  echo hi\n  ```\n'
    )
    found = blocks_of(page)
    assert [(b.lang, b.code, b.line, b.title, b.skipped) for b in found] == [
        ("python", "x = 1", 3, None, False),
        ("python", "y = 2", 7, None, True),
        ("python", "print(1)", 10, "t.py", False),
        ("bash", "echo hi", 13, None, False),
    ]


# ----------------------------------------------------------------------------- the site


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as scripts/test.sh built it this run, else built here (strict)."""
    given = os.environ.get("CONVEYOR_DOCS_SITE")
    if given:
        return Path(given)
    site = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert done.returncode == 0, done.stderr[-6000:]
    return site


def inventory(site: Path) -> dict[str, int]:
    """``{name: priority}`` from the site's ``objects.inv`` (priority 1: rendered there)."""
    raw = (site / "objects.inv").read_bytes()
    body = zlib.decompress(raw.split(b"\n", 4)[4]).decode()
    entries = {}
    for line in body.splitlines():
        name, _, priority, *_ = line.split(" ")
        entries[name] = int(priority)
    return entries


def resolve(path: str) -> Any:
    """The object a dotted documentation path names (module prefix, then attributes)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise LookupError(path)


def test_api_reference_documents_every_public_name(built_site: Path) -> None:
    rendered = [name for name, priority in inventory(built_site).items() if priority == 1]
    documented = set(rendered)
    documented_objects = set()
    for name in rendered:
        try:
            documented_objects.add(id(resolve(name)))
        except (LookupError, AttributeError):
            continue
    missing = []
    for module_name in PUBLIC_MODULES:
        module: ModuleType = importlib.import_module(module_name)
        assert f"{module_name}" in documented, f"no reference page renders {module_name}"
        for name in module.__all__:
            if name.startswith("_") or f"{module_name}.{name}" in documented:
                continue  # private names (torch's _DatasetKind) stay out on purpose
            if id(getattr(module, name)) not in documented_objects:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"public names missing from the API reference: {missing}"


def test_every_page_is_in_the_navigation(built_site: Path) -> None:
    import yaml

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)

    def pages(node: Any) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [p for value in node.values() for p in pages(value)]
        return [p for item in node for p in pages(item)]

    listed = set(pages(config["nav"]))
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert on_disk == listed, f"not in nav: {on_disk - listed}; missing: {listed - on_disk}"


def _reference_text(site: Path) -> str:
    pages = sorted((site / "reference").rglob("index.html"))
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)


def _section_of(html_text: str, anchor: str) -> str:
    """The HTML of one documented object, from its heading to the next object's."""
    start = html_text.index(f'id="{anchor}"')
    end = html_text.find('class="doc doc-heading"', start + len(anchor) + 10)
    return html_text[start : end if end > 0 else None]


def test_the_reference_shows_no_private_names(built_site: Path) -> None:
    """torch's private names conveyor exports (``_DatasetKind``) and the private aliases of
    torch's base classes (``TorchDataLoader[T_co]``) stay out of the API reference."""
    text = re.sub(r"<[^>]+>", "", _reference_text(built_site))
    assert "_DatasetKind" not in text
    assert not re.search(r"\bTorch[A-Z]\w+\[", text) and "TorchDataLoader" not in text


def test_the_dataloader_reads_like_torchs_reference(built_site: Path) -> None:
    """A signature one argument a line (not one 954-character line) and an argument list
    naming every argument."""
    import inspect

    import conveyor

    html = (built_site / "reference" / "conveyor" / "index.html").read_text(encoding="utf-8")
    section = _section_of(html, "conveyor.DataLoader")
    signature = re.sub(r"<[^>]+>", "", re.findall(r"<pre>.*?</pre>", section, re.S)[0])
    assert max(len(line) for line in signature.splitlines()) <= 90
    text = re.sub(r"<[^>]+>", "", section)
    assert "Parameters:" in text
    listed = text.split("Parameters:", 1)[1]
    for name in inspect.signature(conveyor.DataLoader).parameters:
        assert re.search(rf"^\s*{name}\s*$", listed, re.M), f"{name} is not in the list"


def _public_callables() -> list[tuple[str, Any]]:
    import conveyor

    found = []
    for name in conveyor.__all__:
        obj = getattr(conveyor, name)
        if not name.startswith("_") and callable(obj) and not isinstance(obj, ModuleType):
            found.append((name, obj))
    return found


@pytest.mark.parametrize(("name", "obj"), _public_callables(), ids=lambda v: str(v)[:40])
def test_every_public_callable_lists_its_arguments(name: str, obj: Any) -> None:
    import inspect

    try:
        parameters = [
            p.name
            for p in inspect.signature(obj).parameters.values()
            if p.name != "self" and p.kind is not p.VAR_KEYWORD
        ]
    except (TypeError, ValueError):
        return
    if not parameters:
        return
    doc = inspect.getdoc(obj) or ""
    section = re.search(r"^(Args|Attributes):\n((?:    .*\n?|\n)+)", doc, re.M)
    assert section is not None, f"{name}: no Args section"
    for parameter in parameters:
        assert re.search(rf"^    \*?{parameter}:", section.group(2), re.M), (
            f"{name}: {parameter} missing from its Args"
        )


def test_the_docs_extra_can_format_signatures() -> None:
    """mkdocstrings formats long signatures only with Black or Ruff installed: the docs
    extra brings one (without it, DataLoader's signature was one 954-character line)."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    docs = " ".join(extras["optional-dependencies"]["docs"])
    assert re.search(r"\b(ruff|black)\b", docs), docs


def test_the_home_page_links_the_migration_guides_and_shows_the_install(built_site: Path) -> None:
    home = (built_site / "index.html").read_text(encoding="utf-8")
    assert 'href="migrating/torch/"' in home and 'href="migrating/torchdata/"' in home
    text = re.sub(r"<[^>]+>", "", home)
    assert "pip install torch==2.13.0" in text and "-c /path/to/conveyor/constraints.txt" in text


SPEED_PAGES = [
    ROOT / "README.md",
    DOCS / "index.md",
    DOCS / "getting-started.md",
    DOCS / "cli.md",
    DOCS / "scaling-out.md",
    DOCS / "long-runs.md",
    *sorted((DOCS / "guide").glob("*.md")),
    *sorted((DOCS / "migrating").glob("*.md")),
]
_RATIO = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?)x(?=\W)")


def _headline_table() -> str:
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    start = text.index("## Headline figures")
    return text[start : text.index("\n## ", start + 3)]


@pytest.mark.parametrize("page", SPEED_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_speed_figures_are_quoted_from_the_benchmarks_headline_table(page: Path) -> None:
    """One source of truth: every "N-Mx" ratio in the README and the guides is one of
    docs/benchmarks.md's headline figures (S1 was "5-8x" here, 9.2-10.2x there)."""
    headline = _headline_table()
    quoted = set(_RATIO.findall(page.read_text(encoding="utf-8")))
    assert not {figure for figure in quoted if f"{figure}x" not in headline}


def test_the_quick_bench_table_keeps_torch_and_advantage_in_view(built_site: Path) -> None:
    """The `conveyor bench --quick` result was a 101-column code block: its torch and
    advantage columns were off screen. It is an HTML table now (whose cells wrap), and no
    code block on the page holds a result table with those columns."""
    html = (built_site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    for block in re.findall(r"<pre>(.*?)</pre>", html, re.S):
        assert "advantage" not in re.sub(r"<[^>]+>", "", block)
    tables = re.findall(r"<table>(.*?)</table>", html, re.S)
    quick = next(t for t in tables if "S1 tensors bs64 nw2" in t)
    header = re.findall(r"<th[^>]*>(.*?)</th>", quick)
    assert [h.strip() for h in header] == ["scenario", "unit", "conveyor", "torch", "advantage"]
    assert quick.count("<tr>") >= 17 and "3.40x" in quick


def gpu_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if any(b.gpu for b in blocks_of(p)))


@pytest.mark.gpu
@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", gpu_pages(), ids=_page_id)
def test_page_examples_run_on_the_gpu(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path, {}, gpu=True)
