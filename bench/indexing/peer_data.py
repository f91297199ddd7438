"""Vaswani (NPL) and Cranfield in the BEIR layout ``bench/indexing/peer.py`` and ``ragbot eval`` read.

Neither set is in ``../shared/data`` and no registry these machines reach serves them, so this reads the
files where public repositories keep them and writes ``<out>/vaswani`` and ``<out>/cranfield``
(``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``):

- **Vaswani**: Terrier's ``share/vaswani_npl`` (``corpus/doc-text.trec``, ``query-text.trec``, ``qrels``;
  github.com/terrier-org/terrier-core): 11,429 one-paragraph documents, no titles, 93 queries.
- **Cranfield**: the classic ``cran.all.1400``, ``cran.qry`` and ``cranqrel`` files (the SMART
  distribution, kept in many course repositories): 1,400 abstracts with titles, 225 queries. The query
  file numbers its queries 001–365 with gaps, while ``cranqrel`` numbers them 1–225 in file order: the
  qrels follow the file order. Relevance codes 1 (a complete answer) to 4 (of minimum interest) become
  grades 4 to 1; code 5 and -1 (no relevance) are dropped.

Run: ``uv run python -m bench.indexing.peer_data --vaswani DIR --cranfield DIR --out DATA/beir``; then
``bench/indexing/peer.py --data DATA`` measures all three sets.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from pathlib import Path

TREC_DOC = re.compile(r"<DOC>\s*<DOCNO>\s*(\S+?)\s*</DOCNO>(.*?)</DOC>", re.S)
TREC_TOP = re.compile(r"<num>\s*(\S+?)\s*</num>\s*<title>(.*?)</title>", re.S)
SMART_FIELD = re.compile(r"^\.([A-Z])\b ?(.*)$")


def words(text: str) -> str:
    return " ".join(text.split())


def vaswani(folder: Path) -> tuple[list[dict[str, str]], dict[str, str], list[tuple[str, str, int]]]:
    """Terrier's TREC-format NPL collection."""
    corpus_text = (folder / "corpus" / "doc-text.trec").read_text(encoding="utf-8", errors="replace")
    corpus = [{"_id": n, "title": "", "text": words(t)} for n, t in TREC_DOC.findall(corpus_text)]
    topics = (folder / "query-text.trec").read_text(encoding="utf-8", errors="replace")
    queries = {n: words(t).lower() for n, t in TREC_TOP.findall(topics)}
    qrels = []
    for line in (folder / "qrels").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 4 and int(parts[3]) > 0:
            qrels.append((parts[0], parts[2], int(parts[3])))
    return corpus, queries, qrels


def smart_records(path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """(id, {field letter: text}) of each ``.I`` record of a SMART file."""
    record: dict[str, list[str]] | None = None
    number, field = "", ""
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.rstrip("\r")
        match = SMART_FIELD.match(line)
        if match and match.group(1) == "I":
            if record is not None:
                yield number, {k: words(" ".join(v)) for k, v in record.items()}
            number, record, field = match.group(2).strip(), {}, ""
        elif match and record is not None:
            field = match.group(1)
            record.setdefault(field, [])
            if match.group(2):
                record[field].append(match.group(2))
        elif record is not None and field:
            record[field].append(line)
    if record is not None:
        yield number, {k: words(" ".join(v)) for k, v in record.items()}


def cranfield(folder: Path) -> tuple[list[dict[str, str]], dict[str, str], list[tuple[str, str, int]]]:
    """The SMART-format Cranfield 1400 collection."""
    corpus = []
    for number, fields in smart_records(folder / "cran.all.1400"):
        title = fields.get("T", "")
        text = fields.get("W", "")
        # the abstract starts by repeating the title; keep it once
        if title and text.startswith(title):
            text = text[len(title) :].strip()
        corpus.append({"_id": str(int(number)), "title": title, "text": text})
    queries = {
        str(n): fields.get("W", "") for n, (_, fields) in enumerate(smart_records(folder / "cran.qry"), 1)
    }
    qrels = []
    for line in (folder / "cranqrel").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 3 and 1 <= int(parts[2]) <= 4:
            qrels.append((parts[0], parts[1], 5 - int(parts[2])))
    return corpus, queries, qrels


def write(
    out: Path, corpus: list[dict[str, str]], queries: dict[str, str], qrels: list[tuple[str, str, int]]
) -> None:
    """One BEIR folder."""
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(doc, ensure_ascii=False) + "\n" for doc in corpus)
    with (out / "queries.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items())
    with (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    print(f"{out}: {len(corpus)} documents, {len(queries)} queries, {len(qrels)} judgements")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--vaswani", type=Path, help="Terrier's share/vaswani_npl folder")
    parser.add_argument("--cranfield", type=Path, help="a folder with cran.all.1400, cran.qry and cranqrel")
    parser.add_argument("--out", type=Path, required=True, help="the beir folder to write the sets into")
    args = parser.parse_args()
    if args.vaswani:
        write(args.out / "vaswani", *vaswani(args.vaswani))
    if args.cranfield:
        write(args.out / "cranfield", *cranfield(args.cranfield))


if __name__ == "__main__":
    main()
