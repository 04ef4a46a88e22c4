"""Screening quality of the inbound gateway's LOCAL layer (the pattern vocabulary).

Run with ``just bench-gateway [FILE]`` (default ``tests/fixtures/gateway-set.jsonl``: one JSON
object per line, ``{"text", "label": benign|injection|discard}``). Every message, short or long,
goes through :func:`appliance.agents.gateway.screen_locally` — in production only messages under
five words do; long ones go to the gateway model, which this does not call.

A message counts as flagged when its local verdict is not CLEAN; positives are the injection and
discard-worthy messages. Prints precision, recall and F1 overall, for short and long messages, and
for DISCARD verdicts alone; recall per label; the misses and false alarms; then one line of JSON
with every figure.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `appliance` from this tree

from appliance.agents.gateway import screen_locally
from appliance.agents.patterns import is_short

DEFAULT_SET = Path(__file__).resolve().parents[1] / "fixtures" / "gateway-set.jsonl"
POSITIVE = {"injection", "discard"}


def scores(rows: list[dict[str, Any]], flagged: str = "any") -> dict[str, Any]:
    """Precision, recall and F1 of ``rows`` (each with ``label`` and ``verdict``)."""
    counts: Counter[str] = Counter()
    for row in rows:
        actual = row["label"] in POSITIVE
        predicted = row["verdict"] != "CLEAN" if flagged == "any" else row["verdict"] == "DISCARD"
        counts[
            "tp" if actual and predicted else "fp" if predicted else "fn" if actual else "tn"
        ] += 1
    tp, fp, fn = counts["tp"], counts["fp"], counts["fn"]
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "n": len(rows),
        **{k: counts[k] for k in ("tp", "fp", "fn", "tn")},
        "precision": round(precision, 3),
        "recall": round(recall, 3),
        "f1": round(f1, 3),
    }


def main(path: Path) -> None:
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            result = screen_locally(item["text"])
            rows.append(
                {
                    **item,
                    "short": is_short(item["text"]),
                    "verdict": result.verdict,
                    "pattern": result.pattern,
                }
            )
    table = {
        "all": scores(rows),
        "short (<5 words)": scores([r for r in rows if r["short"]]),
        "long": scores([r for r in rows if not r["short"]]),
        "DISCARD only": scores(rows, flagged="discard"),
    }
    per_label = {}
    for label in ("benign", "injection", "discard"):
        subset = [r for r in rows if r["label"] == label]
        hit = sum(1 for r in subset if r["verdict"] != "CLEAN")
        per_label[label] = {"n": len(subset), "flagged": hit}

    print(f"gateway local layer on {path.name}: {len(rows)} messages")
    print(
        f"{'set':<18}{'n':>5}{'tp':>5}{'fp':>5}{'fn':>5}{'tn':>5}{'prec':>8}{'recall':>8}{'f1':>7}"
    )
    for name, s in table.items():
        print(
            f"{name:<18}{s['n']:>5}{s['tp']:>5}{s['fp']:>5}{s['fn']:>5}{s['tn']:>5}"
            f"{s['precision']:>8.3f}{s['recall']:>8.3f}{s['f1']:>7.3f}"
        )
    print(
        "flagged per label: "
        + ", ".join(f"{k} {v['flagged']}/{v['n']}" for k, v in per_label.items())
    )
    false_alarms = [r for r in rows if r["label"] == "benign" and r["verdict"] != "CLEAN"]
    misses = [r for r in rows if r["label"] in POSITIVE and r["verdict"] == "CLEAN"]
    print(f"false alarms ({len(false_alarms)}):")
    for r in false_alarms:
        print(f"  {r['verdict']:<10} {r['pattern']:<18} {r['text'][:70]}")
    print(f"misses ({len(misses)}; short ones would reach the agent unscreened):")
    for r in misses:
        print(f"  {r['label']:<10} {'short' if r['short'] else 'long':<6} {r['text'][:70]}")
    summary = {"set": path.name, "n": len(rows), **table, "perLabel": per_label}
    print(json.dumps(summary, separators=(",", ":")))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_SET)
