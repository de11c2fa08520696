"""How much the typed codec costs over plain JSON, per action envelope.

    python benchmarks/codec_bench.py [--count N]

Prints envelopes per second for a strict decode, a lenient decode and an
encode, each beside json.loads/json.dumps of the same frames, and the ratio.
There is no pass/fail here: the numbers are for the closing note and for
spotting a regression between two runs on the same machine.
"""

from __future__ import annotations

import argparse
import json
import time

from ahpd.protocol import codec, model

FRAMES = [
    {"channel": "ahp-chat:/c", "serverSeq": 1,
     "action": {"type": "chat/delta", "turnId": "t", "partId": "p", "content": "hello " * 8}},
    {"channel": "ahp-chat:/c", "serverSeq": 2,
     "action": {"type": "chat/toolCallStart", "turnId": "t", "toolCallId": "c",
                "toolName": "bash", "displayName": "Bash"}},
    {"channel": "ahp-root://", "serverSeq": 3,
     "action": {"type": "root/activeSessionsChanged", "activeSessions": 4}},
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
    print(f"json.loads            {baseline_in:12,.0f} frames/s")
    print(f"strict decode         {strict:12,.0f} frames/s  ({strict / baseline_in:.2f}x json.loads)")
    print(f"lenient decode        {lenient:12,.0f} frames/s  ({lenient / baseline_in:.2f}x json.loads)")
    print(f"json.dumps            {baseline_out:12,.0f} frames/s")
    print(f"encode + json.dumps   {encode:12,.0f} frames/s  ({encode / baseline_out:.2f}x json.dumps)")


if __name__ == "__main__":
    main()
