#!/usr/bin/env python3
"""An independent X12 reader for edi-inbox's tests: PyPI ``pyx12`` 4.0.0's ``X12Reader`` reads
each FILE (an answer edi-inbox wrote: a TA1, a 997 or 999, or both) and checks its envelope as it
goes (ISA/IEA control numbers and counts, GS/GE, ST/SE segment counts). Unlike the ``edi`` crate,
it takes a TA1 outside any group, where X12 puts it.

    pyx12_read.py FILE...

One JSON line per FILE: ``{"file": ..., "separators": [segment, element, component],
"segments": [[TAG, ELEMENT, ...], ...], "errors": [[where, code, text], ...]}``, each element as
pyx12 read it (a composite's components joined again at the component separator pyx12 found;
an element pyx12 skips as empty, ``""``).
"""

from __future__ import annotations

import json
import sys

import pyx12.x12file


def read(path: str) -> dict:
    src = pyx12.x12file.X12Reader(path)
    segments = []
    for seg in src:
        elements: dict[int, list[tuple[int, str]]] = {}
        for _ref, ele, sub, value in seg.values_iterator():
            elements.setdefault(int(ele), []).append((int(sub) if sub else 1, value))
        term = src.get_term()
        component = term[2]
        row = [seg.get_seg_id()]
        for n in range(1, max(elements, default=0) + 1):
            parts = dict(elements.get(n, []))
            row.append(component.join(parts.get(k, "") for k in range(1, max(parts, default=1) + 1)))
        segments.append(row)
    term = src.get_term()
    errors = [[e[0], e[1], e[2]] for e in src.pop_errors()]
    src.cleanup() if hasattr(src, "cleanup") else None
    return {"file": path, "separators": list(term[:3]), "segments": segments, "errors": errors}


def main() -> int:
    for path in sys.argv[1:]:
        print(json.dumps(read(path)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
