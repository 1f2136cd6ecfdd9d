"""Smoke test of examples/train_charlm.py (the second main job) in a tiny configuration:
stdlib corpus, causal TransformerEncoder, per-epoch perplexity, checkpoint round trip, sampling."""
import math
import os

from _examples import load_example


def _example():
    return load_example("train_charlm")


def test_tiny_charlm_run(tmp_path, capsys):
    mod = _example()
    history = mod.main(["--epochs", "2", "--steps", "4", "--batch-size", "4", "--block", "16", "--d-model", "16",
                        "--nhead", "2", "--layers", "1", "--ff", "32", "--corpus-kb", "20", "--val-batches", "2",
                        "--sample-chars", "30", "--lr", "1e-2", "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert len(history) == 2 and all(math.isfinite(v) for v in history)
    assert history[1] < math.log(len(mod.VOCAB))  # it learned something: better than uniform
    assert out.count("perplexity") >= 3 and "after reloading" in out
    sampled = out.split("--- sampled from the model (prompt 'def ') ---\n")[1].split("\n---")[0]
    assert sampled.startswith("def ") and len(sampled) == 4 + 30
    assert (tmp_path / "charlm.safetensors").exists()


def test_corpus_is_the_stdlib_source():
    mod = _example()
    data, n_files, root = mod.load_corpus(8)
    assert len(data) == 8 * 1024 and n_files >= 1 and os.path.isdir(root)
    text = "".join(mod.VOCAB[i] for i in data[:200])
    assert text.startswith("# file: ") and ".py\n" in text
