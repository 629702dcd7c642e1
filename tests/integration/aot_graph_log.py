"""Reads torch's own log of AOTAutograd's graphs (TORCH_LOGS=aot_graphs): the
conversions each forward and backward graph holds, at the user lines its
`# File:` comments name. The compile tests count casts from it, apart from
castscope's own reading of the graphs."""
from __future__ import annotations

import re
from collections import Counter

_MARK = "[__aot_graphs] "
_SECTION = re.compile(r"===== (?P<kind>Forward|Backward) graph \d+ =====")
_LOCATION = re.compile(r"# (?:Backward of forward node: )?File: (?P<file>.+?):(?P<line>\d+) in ")
_TYPED = re.compile(r'(?P<name>\w+): "(?P<dtype>[a-z0-9]+)\[')
_CONVERSION = re.compile(r'^(?P<name>\w+): "(?P<dtype>[a-z0-9]+)\[[^"]*" = torch\.ops\.'
                         r'(?:prims\.convert_element_type\.default|aten\._to_copy\.default)\((?P<source>\w+)')


def conversions(log_text: str, src: str = "f32", dst: str = "bf16") -> Counter:
    """(graph kind "forward"/"backward", file, line) -> number of `src` to `dst`
    conversions, over every graph in the log."""
    found: Counter = Counter()
    kind, location, dtypes = None, None, {}
    for raw in log_text.splitlines():
        if _MARK not in raw:
            continue
        text = raw.split(_MARK, 1)[1].strip()
        section = _SECTION.search(text)
        if section:
            kind, location, dtypes = section["kind"].lower(), None, {}
            continue
        if kind is None:
            continue
        if not text:
            location = None  # the printer leaves a blank line where the stack trace changes
            continue
        where = _LOCATION.search(text)
        if where:
            location = (where["file"], int(where["line"]))
            continue
        for typed in _TYPED.finditer(text):  # placeholders and assignments
            dtypes[typed["name"]] = typed["dtype"]
        conversion = _CONVERSION.match(text)
        if conversion and conversion["dtype"] == dst and dtypes.get(conversion["source"]) == src and location:
            found[(kind, *location)] += 1
    return found
