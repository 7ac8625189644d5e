"""Files that used to abort `ragkit index` or vanish silently: unreadable files and folders, names
that are not UTF-8, UTF-16/32 text, damaged PDFs that printed pypdf's warnings raw."""

import codecs
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ragkit.index.ingest import load_files

pytestmark = pytest.mark.fault("clear_error")
REPO = Path(__file__).resolve().parents[2]
SAMPLE_DOCS = REPO / "sample_docs"


@pytest.fixture
def world_readable_folder():
    """A folder user "nobody" can walk (pytest's tmp_path sits under a 0700 folder of root's)."""
    folder = Path(tempfile.mkdtemp(prefix="ragkit-perm-"))
    folder.chmod(0o755)
    yield folder
    for dirpath, dirnames, _ in os.walk(folder):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o755)
    shutil.rmtree(folder, ignore_errors=True)


def _load_as_unprivileged(folder: Path) -> dict:
    """load_files(folder) as a user chmod 000 applies to: this user, or "nobody" when run as root
    (root reads anything). The child imports everything first, then drops root."""
    if os.geteuid() != 0:
        report = load_files(folder)
        return {"files": [f.source for f in report.files], "skipped": [list(s) for s in report.skipped]}
    script = (
        "import codecs, json, os, pwd, sys\n"
        "import ragkit\n"
        "for name in ('utf-8-sig', 'utf-16', 'utf-32'): codecs.lookup(name)  # lazily imported codecs, while /root is readable\n"
        "from ragkit.index.ingest import load_files\n"
        "nobody = pwd.getpwnam('nobody')\n"
        "os.setgroups([]); os.setgid(nobody.pw_gid); os.setuid(nobody.pw_uid)\n"
        "try:\n"
        "    open(sys.argv[2], 'rb')\n"
        "    sys.exit('still readable after dropping root')\n"
        "except PermissionError:\n"
        "    pass\n"
        "r = load_files(sys.argv[1])\n"
        "print(json.dumps({'files': [f.source for f in r.files], 'skipped': r.skipped}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder), str(folder / "locked.md")], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(os.geteuid() == 0 and not hasattr(os, "setuid"), reason="needs os.setuid to drop root")
def test_an_unreadable_file_and_an_unreadable_folder_are_skipped_with_a_reason(world_readable_folder):
    folder = world_readable_folder
    (folder / "good.md").write_text("# Good\n\nThe Rhine flows north.\n")
    (folder / "locked.md").write_text("# Locked\n\nSecret.\n")
    (folder / "closed").mkdir()
    (folder / "closed" / "inside.md").write_text("# Inside\n\nHidden by the folder's mode.\n")
    for p in folder.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    (folder / "locked.md").chmod(0o000)
    (folder / "closed").chmod(0o000)

    result = _load_as_unprivileged(folder)
    reasons = dict(map(tuple, result["skipped"]))
    assert result["files"] == ["good.md"]
    assert "permission denied" in reasons["locked.md"]
    assert "permission denied" in reasons["closed"]


def test_a_file_name_that_is_not_utf8_is_indexed_under_a_storable_stable_name(tmp_path):
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xffbyte.md"), "wb") as fh:
        fh.write(b"Plain text about the Rhine and its barges.\n")
    (tmp_path / "fine.md").write_text("Another file.\n")
    first, second = load_files(tmp_path), load_files(tmp_path)
    names = [f.source for f in first.files]
    assert names == ["bad\\xffbyte.md", "fine.md"] and names == [f.source for f in second.files]
    for f in first.files:  # the records the index writes: JSON with ensure_ascii=False, in UTF-8
        json.dumps({"content": f.document.content, "meta": f.document.meta}, ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "utf-8"])
def test_text_with_a_byte_order_mark_is_decoded(tmp_path, encoding):
    bom = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE, "utf-32-le": codecs.BOM_UTF32_LE,
           "utf-32-be": codecs.BOM_UTF32_BE, "utf-8": codecs.BOM_UTF8}[encoding]
    text = "# Zürich\n\nThe Limmat flows through Zürich — 東京 too.\n"
    (tmp_path / "notes.md").write_bytes(bom + text.encode(encoding))
    report = load_files(tmp_path)
    assert report.skipped == []
    assert report.files[0].document.content == text and report.files[0].document.meta["title"] == "Zürich"


def test_a_damaged_pdf_says_why_in_its_skip_reason_and_prints_nothing(tmp_path, capfd):
    data = (SAMPLE_DOCS / "python_docs" / "library_functools.pdf").read_bytes()
    (tmp_path / "truncated.pdf").write_bytes(data[:3000])
    report = load_files(tmp_path)
    out, err = capfd.readouterr()
    assert "EOF marker" not in err and "EOF marker" not in out
    assert report.files == [] and "EOF marker not found" in dict(report.skipped)["truncated.pdf"]


def test_converting_shows_a_progress_bar_over_files(tmp_path, capfd):
    for i in range(3):
        (tmp_path / f"f{i}.md").write_text(f"File number {i}.\n")
    load_files(tmp_path, progress=True)
    assert "converting" in capfd.readouterr().err
    load_files(tmp_path)
    assert "converting" not in capfd.readouterr().err
