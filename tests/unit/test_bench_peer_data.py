"""bench/indexing/peer_data.py: Vaswani's TREC files and Cranfield's SMART files become BEIR folders
that ``ragbot eval``'s loader reads, with Cranfield's qrels numbered in query-file order."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.indexing.peer_data import cranfield, vaswani, write  # noqa: E402
from ragbot.evaluation import load_beir  # noqa: E402

CRAN_ALL = (
    ".I 1\r\n.T\r\nwing in a slipstream .\r\n.A\r\nbrenckman,m.\r\n.B\r\nj. ae. scs. 25, 1958, 324.\r\n"
    ".W\r\nwing in a slipstream .\r\n  an experimental study of a wing\r\nin a propeller slipstream .\r\n"
    ".I 2\r\n.T\r\nsimple shear flow past a flat plate .\r\n.W\r\nsimple shear flow past a flat plate .\r\n"
    "the flow is studied .\r\n"
)
CRAN_QRY = ".I 001\n.W\nwhat about slipstreams .\n.I 008\n.W\nshear flow past plates ?\n"
CRAN_QREL = "1 1 2\n1 2 -1\n2 2 1\n2 1 5\n"
NPL_DOCS = (
    "<DOC>\n<DOCNO>1</DOCNO>\ncompact memories  a digital\ndata storage\n</DOC>\n"
    "<DOC>\n<DOCNO>2</DOCNO>\nan analogue computer\n</DOC>\n"
)
NPL_TOPICS = "<top>\n<num>1</num><title>\nDIGITAL STORAGE\n</title>\n</top>\n"
NPL_QRELS = "1 0 1 1\n1 0 2 0\n"


def test_cranfield_keeps_title_once_and_numbers_queries_in_file_order(tmp_path: Path) -> None:
    source = tmp_path / "cran"
    source.mkdir()
    (source / "cran.all.1400").write_text(CRAN_ALL, encoding="utf-8", newline="")
    (source / "cran.qry").write_text(CRAN_QRY, encoding="utf-8")
    (source / "cranqrel").write_text(CRAN_QREL, encoding="utf-8")
    corpus, queries, qrels = cranfield(source)
    assert corpus[0] == {
        "_id": "1",
        "title": "wing in a slipstream .",
        "text": "an experimental study of a wing in a propeller slipstream .",
    }
    # .I 008 is the second query: cranqrel calls it 2
    assert queries == {"1": "what about slipstreams .", "2": "shear flow past plates ?"}
    # code 1 (a complete answer) is the highest grade; -1 and 5 are dropped
    assert qrels == [("1", "1", 3), ("2", "2", 4)]
    write(tmp_path / "beir" / "cranfield", corpus, queries, qrels)
    dataset = load_beir(tmp_path / "beir" / "cranfield")
    assert dataset.qrels == {"1": {"1": 3}, "2": {"2": 4}}
    assert dataset.corpus["2"].text == "the flow is studied ."


def test_vaswani_reads_terrier_trec_files(tmp_path: Path) -> None:
    source = tmp_path / "vaswani_npl"
    (source / "corpus").mkdir(parents=True)
    (source / "corpus" / "doc-text.trec").write_text(NPL_DOCS, encoding="utf-8")
    (source / "query-text.trec").write_text(NPL_TOPICS, encoding="utf-8")
    (source / "qrels").write_text(NPL_QRELS, encoding="utf-8")
    corpus, queries, qrels = vaswani(source)
    assert [d["text"] for d in corpus] == ["compact memories a digital data storage", "an analogue computer"]
    assert queries == {"1": "digital storage"}
    assert qrels == [("1", "1", 1)]
