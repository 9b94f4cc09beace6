import math

import pytest

from gateway.retrieval.evaluation import document_ranking, load_qrels, score
from tests.retrieval.test_fusion import hit


def test_metrics_match_hand_computed_values():
    qrels = {"q1": {"d1": 1, "d3": 1}, "q2": {"d9": 1}}
    run = {"q1": {"d2": 3.0, "d1": 2.0, "d3": 1.0}, "q2": {"d1": 1.0}}
    metrics = score(run, qrels)
    ideal = 1 + 1 / math.log2(3)
    ndcg_q1 = (1 / math.log2(3) + 1 / math.log2(4)) / ideal
    assert metrics["ndcg@10"] == pytest.approx(ndcg_q1 / 2, abs=1e-4)
    assert metrics["recall@100"] == pytest.approx(0.5)
    assert metrics["mrr@10"] == pytest.approx(0.25)


def test_query_without_results_counts_as_zero():
    assert score({}, {"q": {"d": 1}}) == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}


def test_chunks_collapse_to_documents_by_best_chunk():
    hits = [hit("a", 0.9), hit("b", 0.8), hit("a", 0.7), hit("c", 0.6)]
    assert document_ranking(hits, depth=2) == {"a": 0.9, "b": 0.8}


def test_qrels_header_is_checked(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text("a\tb\tc\n1\t2\t1\n")
    with pytest.raises(ValueError, match="expected a BEIR qrels header"):
        load_qrels(path)


def test_eval_without_the_eval_extra_names_the_extra_to_install(tmp_path, monkeypatch, capsys):
    """pytrec-eval-terrier (and SciPy with it) is the `eval` extra: a serving install has no trec_eval."""
    import sys

    from gateway.cli import main
    from gateway.errors import ConfigError

    monkeypatch.setitem(sys.modules, "pytrec_eval", None)  # as on `pip install .`: the import fails
    with pytest.raises(ConfigError, match=r"install the gateway's `eval` extra: pip install -e '\.\[eval\]'"):
        score({"q": {"d": 1.0}}, {"q": {"d": 1}})
    args = ["eval", "--tenant", "t", "--namespace", "n", "--collection", "c",
            "--queries", str(tmp_path / "q.jsonl"), "--qrels", str(tmp_path / "qrels.tsv")]
    assert main(args) == 2
    assert "error [CONFIG_ERROR]: `gateway eval` scores with trec_eval" in capsys.readouterr().err
