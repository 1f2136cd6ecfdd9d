"""scripts/gen_op_table.py: one row per registered primitive, in name order, no rule missing.

README.md's copy must be current: after adding a primitive, run `python scripts/gen_op_table.py`.
"""
import os
import subprocess
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


def test_readme_table_is_current():
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_op_table.py"), "--check"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, f"README op table is stale; run python scripts/gen_op_table.py\n{res.stdout}{res.stderr}"
