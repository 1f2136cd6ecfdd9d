"""scripts/gen_op_table.py: one row per registered primitive, in name order, no rule missing.

Whether README.md's copy is current is `python scripts/gen_op_table.py --check` (not a test here:
with many branches adding primitives at once it would fail every land that adds one).
"""
import os
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_table_rows_follow_the_registry():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import gen_op_table

    reg = gen_op_table.load_all()
    body = gen_op_table.table(reg)
    assert "**missing**" not in body
    rows = [line for line in body.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == sorted(reg)
    nondiff = [n for n, p in reg.items() if not p.differentiable]
    assert nondiff and all(f"| `{n}` | yes | n/a (no gradient) |" in body for n in nondiff)
