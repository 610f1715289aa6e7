"""Reads interchanges with pydifact, an independent EDIFACT reader, for tests/it/segments.rs.

Each line of standard input is a JSON object: `path`, a file holding one interchange (from its
UNA or UNB to its UNZ, transport line breaks already taken out, since pydifact keeps them as
data), and `syntax`, its syntax identifier (UNB 0001). Each line of standard output is the JSON
array of its segments as pydifact's tokenizer splits them: the tag, then each data element, a
string where pydifact reads one component and a list of strings where it reads several. The
bytes are decoded here with Python's own codecs for the repertoire, each byte a codec cannot
decode read as the ISO 8859-1 character of its number, as docs/parser.md says edi-inbox does.
"""

import codecs
import json
import sys

from pydifact.control import Characters
from pydifact.parser import Parser, TokenIterator
from pydifact.tokenizer import Tokenizer

CODECS = {
    "UNOA": "ascii",
    "UNOB": "ascii",
    "UNOC": "latin-1",
    "UNOD": "iso8859_2",
    "UNOE": "iso8859_5",
    "UNOF": "iso8859_7",
    "UNOG": "iso8859_3",
    "UNOH": "iso8859_4",
    "UNOI": "iso8859_6",
    "UNOJ": "iso8859_8",
    "UNOK": "iso8859_9",
    "UNOW": "utf-8",
    "UNOY": "utf-8",
}


def latin1(error):
    return (chr(error.object[error.start]), error.start + 1)


codecs.register_error("edi-inbox-latin1", latin1)


def read(text):
    if text.startswith("UNA"):
        characters = Characters.from_str(text[:9])
        text = text[9:]
    elif text[3:4] == "\x1d":
        # Syntax level B: no release character, which pydifact cannot be without: one that does
        # not occur in the text stands in for none.
        unused = next(chr(c) for c in range(1, 32) if chr(c) not in text)
        characters = Characters(
            component_separator="\x1f",
            data_separator="\x1d",
            escape_character=unused,
            segment_terminator="\x1c",
        )
    else:
        characters = Characters()
    tokens = TokenIterator(Tokenizer().get_tokens(text, characters))
    return [list(s) for s in Parser().convert_tokens_to_raw_segments(tokens)]


for line in sys.stdin:
    job = json.loads(line)
    with open(job["path"], "rb") as f:
        data = f.read()
    text = data.decode(CODECS.get(job["syntax"], "latin-1"), "edi-inbox-latin1")
    print(json.dumps(read(text)), flush=True)
