"""How much the typed codec costs over plain JSON, per action envelope.

    python benchmarks/codec_bench.py [--count N]

Prints envelopes per second for a strict decode, a lenient decode and an
encode, each beside json.loads/json.dumps of the same frames, and the ratio;
and the host's own framing (``jsonrpc.parse``, which refuses what is not
JSON, and ``jsonrpc.dumps``, which writes nothing that is not) beside them.
There is no pass/fail here: the numbers are for the closing note and for
spotting a regression between two runs on the same machine.
"""

from __future__ import annotations

import argparse
import json
import time

from ahpd.host.kernel import jsonrpc
from ahpd.protocol import codec, model

FRAMES = [
    {
        "channel": "ahp-chat:/c",
        "serverSeq": 1,
        "action": {"type": "chat/delta", "turnId": "t", "partId": "p", "content": "hello " * 8},
    },
    {
        "channel": "ahp-chat:/c",
        "serverSeq": 2,
        "action": {
            "type": "chat/toolCallStart",
            "turnId": "t",
            "toolCallId": "c",
            "toolName": "bash",
            "displayName": "Bash",
        },
    },
    {"channel": "ahp-root://", "serverSeq": 3, "action": {"type": "root/activeSessionsChanged", "activeSessions": 4}},
]


def rate(fn, items, count: int) -> float:
    start = time.perf_counter()
    n = 0
    while n < count:
        for item in items:
            fn(item)
            n += 1
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=30000)
    args = parser.parse_args()
    texts = [json.dumps(f) for f in FRAMES]
    objs = [codec.decode(model.ActionEnvelope, f) for f in FRAMES]
    baseline_in = rate(json.loads, texts, args.count)
    strict = rate(lambda t: codec.decode(model.ActionEnvelope, json.loads(t)), texts, args.count)
    lenient = rate(lambda t: codec.decode(model.ActionEnvelope, json.loads(t), strict=False), texts, args.count)
    baseline_out = rate(lambda o: json.dumps(o), FRAMES, args.count)
    encode = rate(lambda o: json.dumps(codec.encode(o)), objs, args.count)
    notes = [jsonrpc.notification_frame("action", f) for f in FRAMES]
    notes.append(notes[0].replace("hello", "h\u00e9llo \U0001f600"))  # non-ASCII text
    loads_notes = rate(json.loads, notes, args.count)
    parse = rate(jsonrpc.parse, notes, args.count)
    dumps_plain = rate(lambda o: json.dumps(o, ensure_ascii=False, separators=(",", ":")), FRAMES, args.count)
    dumps_strict = rate(jsonrpc.dumps, FRAMES, args.count)
    print(f"json.loads            {baseline_in:12,.0f} frames/s")
    print(f"strict decode         {strict:12,.0f} frames/s  ({strict / baseline_in:.2f}x json.loads)")
    print(f"lenient decode        {lenient:12,.0f} frames/s  ({lenient / baseline_in:.2f}x json.loads)")
    print(f"json.dumps            {baseline_out:12,.0f} frames/s")
    print(f"encode + json.dumps   {encode:12,.0f} frames/s  ({encode / baseline_out:.2f}x json.dumps)")
    print(f"jsonrpc.parse         {parse:12,.0f} frames/s  ({parse / loads_notes:.2f}x json.loads)")
    print(f"jsonrpc.dumps         {dumps_strict:12,.0f} frames/s  ({dumps_strict / dumps_plain:.2f}x json.dumps)")


if __name__ == "__main__":
    main()
