import pytest

from conftest import SAMPLE_DOCS
from ragkit.index.ingest import IngestError, load_files


def test_sample_docs_all_load_with_metadata():
    report = load_files(SAMPLE_DOCS)
    assert report.skipped == []
    by_type = {f.document.meta["file_type"] for f in report.files}
    assert by_type == {"markdown", "text", "pdf", "html"}
    tesla = next(f for f in report.files if f.source == "wikipedia/Nikola_Tesla.md")
    assert tesla.document.meta["title"] == "Nikola Tesla"
    html = next(f for f in report.files if f.source.endswith("tutorial_datastructures.html"))
    assert "¶" not in html.document.content and "<script" not in html.document.content
    assert "list.append" in html.document.content
    assert html.document.meta["title"] == "5. Data Structures"  # its own heading, not its <title>'s "… — Python 3.11.2 documentation"
    pdf = next(f for f in report.files if f.source.endswith(".pdf"))
    assert pdf.document.content.count("\f") >= 1  # page breaks survive for page metadata
    assert "lru_cache" in pdf.document.content


@pytest.fixture
def messy_folder(tmp_path):
    (tmp_path / "good.md").write_text("# Good\n\nThe Rhine flows into the North Sea.\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("   \n\n  ")
    (tmp_path / "binary.txt").write_bytes(b"\x00\x01\x02\x03" * 100)
    (tmp_path / "latin1.md").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage" + b"\x00" * 50)
    (tmp_path / "fake.pdf").write_text("this is not a pdf")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "secret.md").write_text("# hidden")
    return tmp_path


def test_bad_files_are_reported_with_a_reason_and_good_ones_still_load(messy_folder):
    report = load_files(messy_folder)
    assert [f.source for f in report.files] == ["good.md"]
    reasons = dict(report.skipped)
    assert reasons["empty.txt"] == "empty file"
    assert reasons["blank.txt"] == "no extractable text"
    assert "binary" in reasons["binary.txt"]
    assert "not UTF-8" in reasons["latin1.md"]
    assert "PDF" in reasons["broken.pdf"]
    assert "not a PDF" in reasons["fake.pdf"]
    assert "image.png" not in reasons and ".hidden/secret.md" not in reasons  # not a supported type / hidden
    assert report.other_types == {".png": 1}  # counted, so the user is told; a hidden file is not


def test_restructuredtext_is_read_as_text_and_other_types_are_counted(tmp_path):
    (tmp_path / "guide.rst").write_text("Install\n=======\n\nRun ``pyenv install 3.12`` to build Python 3.12.\n")
    (tmp_path / "setup.py").write_text("print('hi')\n")
    (tmp_path / "tool.py").write_text("print('hi')\n")
    (tmp_path / "Makefile").write_text("all:\n")
    report = load_files(tmp_path)
    [guide] = report.files
    assert guide.source == "guide.rst" and guide.document.meta["file_type"] == "text" and "pyenv install 3.12" in guide.document.content
    assert report.other_types == {".py": 2, "(no suffix)": 1} and list(report.other_types) == [".py", "(no suffix)"]  # most first


def test_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(IngestError, match="no supported files"):
        load_files(tmp_path)


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(IngestError, match="does not exist"):
        load_files(tmp_path / "nope")


def test_markdown_front_matter_becomes_metadata_not_text(tmp_path):
    from ragkit.index.ingest import load_files

    (tmp_path / "a.md").write_text("---\nattribution: 'Wikipedia article \"A\"'\nlicense: CC BY-SA 4.0\nsource: spoofed\n---\n# A\n\nA is a letter.\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("---\nlist: [1, 2]\n---\n# B\n\nB too.\n", encoding="utf-8")  # not scalars: kept as text
    (tmp_path / "c.md").write_text("---\nlicense: MIT\n---\n", encoding="utf-8")  # nothing but front matter
    report = load_files(tmp_path)
    docs = {f.source: f.document for f in report.files}
    assert docs["a.md"].content.startswith("# A") and "attribution" not in docs["a.md"].content
    assert docs["a.md"].meta["license"] == "CC BY-SA 4.0" and docs["a.md"].meta["attribution"] == 'Wikipedia article "A"'
    assert docs["a.md"].meta["source"] == "a.md"  # ragkit's own keys are never taken from the file
    assert docs["b.md"].content.startswith("---") and "list" not in docs["b.md"].meta
    assert dict(report.skipped)["c.md"].startswith("no extractable text")


def test_documentation_pages_lose_their_permalinks_and_are_titled_by_their_own_name(tmp_path):
    # the shape of Node.js's API pages: a banner heading with the site's name on every page, the page's
    # name first in <title>, and a "#" link to its own anchor closing every heading
    body = (
        "<p>The <code>node:tty</code> module provides the <code>tty.ReadStream</code> and <code>tty.WriteStream</code> classes. "
        "In most cases it will not be necessary or possible to use this module directly. Section ¶ 3 and C# stay as written.</p>"
    )
    page = (
        "<html><head><title>TTY | Node.js v20.20.2 Documentation</title></head><body>"
        '<h1>Node.js v20.20.2 documentation</h1><div id="apicontent">'
        '<h2>TTY<span><a class="mark" href="#tty" id="tty">#</a></span></h2>' + body +
        '<h3>Class: <code>tty.ReadStream</code><span><a class="mark" href="#class-ttyreadstream">#</a></span></h3>' + body +
        '<h3>Using C#<a class="headerlink" href="#using-c" title="Permalink to this heading">&para;</a></h3>' + body +
        "</div></body></html>"
    )
    (tmp_path / "tty.html").write_text(page, encoding="utf-8")
    # a page whose heading the extraction drops is titled by its <title>'s own part, not its file name
    (tmp_path / "errors.html").write_text(
        "<html><head><title>8. Errors and Exceptions &#8212; Python 3.11.2 documentation</title></head><body>"
        "<h1>8. Errors and Exceptions</h1>" + body + "</body></html>", encoding="utf-8"
    )
    docs = {f.source: f.document for f in load_files(tmp_path).files}
    tty = docs["tty.html"]
    assert tty.meta["title"] == "TTY"
    headings = [line for line in tty.content.splitlines() if line.startswith("#")]
    assert "## TTY" in headings and "### Class: `tty.ReadStream`" in headings and "### Using C#" in headings, headings
    assert "Section ¶ 3 and C# stay as written" in tty.content
    assert docs["errors.html"].meta["title"] == "8. Errors and Exceptions"


def _text_pdf(lines: list[str]) -> bytes:
    """A one-page PDF that shows ``lines``, one printed line each, as a justified layout breaks them."""
    ops = "BT /F1 11 Tf 72 720 Td 14 TL " + " ".join(f"({line}) Tj T*" for line in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(ops)} >>\nstream\n{ops}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = "%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n" + "".join(f"{o:010d} 00000 n \n" for o in offsets)
    return (out + f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n").encode("latin-1")


def test_words_a_pdf_layout_broke_across_lines_are_joined(tmp_path):
    # as libtasn1's manual prints them: 23 words broken at line ends in 70,000 characters
    (tmp_path / "manual.pdf").write_bytes(_text_pdf([
        "The library supports the manip-", "ulation of DER encodings and well-", "known structures such as well-known",
        "certificates, as RFC-", "5280 says.",
    ]))
    text = load_files(tmp_path).files[0].document.content
    assert "manipulation of DER" in text and "manip-" not in text
    assert "well-known structures" in text  # the same text writes it with its hyphen elsewhere
    assert "RFC-\n5280" in text  # not a lower-case letter on both sides
