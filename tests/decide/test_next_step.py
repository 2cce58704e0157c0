"""next_step: the budget never exceeds the images left without a label, and says so."""

from zoorank.decide.next_step import LABELS_TO_SETTLE, next_step


def test_a_small_pool_caps_the_budget_at_what_is_unlabelled_with_a_sentence():
    measured = int(LABELS_TO_SETTLE["encoder"]["budget"])
    small = measured // 4
    step = next_step("encoder", 0, "run.yaml", small, "photos")
    assert step["budget"] == small and step["command"].endswith(f"--budget {small}")
    assert step["basis"].startswith(f"The pool is small: only {small} image(s) of photos")
    assert step["short"] == f"every unlabelled image: {small} of the measured {measured}"
    roomy = next_step("encoder", 0, "run.yaml", measured * 10, "photos")
    assert roomy["budget"] == measured and "pool is small" not in roomy["basis"]
