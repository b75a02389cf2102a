"""The README's sample review comment is generated from the code (docs/review-comment-sample.md,
`python -m review.sample`): it cannot go stale unnoticed."""

from review.sample import SAMPLE, main, sample_document
from tests.harness.program_harness import ROOT


def test_the_sample_comment_is_what_the_code_renders_now():
    assert SAMPLE.read_text() == sample_document(), "docs/review-comment-sample.md is stale: python -m review.sample"
    assert main(["--check"]) == 0


def test_the_sample_shows_the_new_node_and_the_readme_links_it():
    text = SAMPLE.read_text()
    assert "+++ b/files/gpu-c004-lxc/config" in text and "+NodeName=c004 NodeAddr=10.42.3.6" in text
    readme = (ROOT / "README.md").read_text()
    assert "(docs/review-comment-sample.md)" in readme
    assert "````markdown" not in readme  # no hand-copied sample left to go stale
