"""The sample review comment of docs/previews.md is generated from the code (docs/review-comment-sample.md,
`python -m review.sample`): it cannot go stale unnoticed."""

from review.sample import SAMPLE, main, sample_document
from tests.harness.docs import DOCS, README, doc_files


def test_the_sample_comment_is_what_the_code_renders_now():
    assert SAMPLE.read_text() == sample_document(), "docs/review-comment-sample.md is stale: python -m review.sample"
    assert main(["--check"]) == 0


def test_the_sample_shows_the_new_node_and_the_docs_link_it():
    text = SAMPLE.read_text()
    assert "+++ b/files/gpu-c004-lxc/config" in text and "+NodeName=c004 NodeAddr=10.42.3.6" in text
    assert "(review-comment-sample.md)" in (DOCS / "previews.md").read_text()
    assert "(docs/review-comment-sample.md)" in README.read_text()
    for path in doc_files():  # no hand-copied sample left to go stale
        # The real engine's sample is written by tests/test_e2e_up.py, which checks it.
        assert (
            path in (SAMPLE, SAMPLE.with_name("review-comment-sample-engine.md"))
            or "````markdown" not in path.read_text()
        )
