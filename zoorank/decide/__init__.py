"""The decision layer, shared by RANK and REPORT: reads the metric, oracle, fold and manifest rows RANK
gathers (and the ``leaderboard``/``agreement``/``failed`` tables REPORT reads back); writes nothing
itself but the leaderboard table (:mod:`~zoorank.decide.leaderboard`) and ``decision.json``
(:mod:`~zoorank.decide.verdict`).

- :mod:`~zoorank.decide.leaderboard`: the leaderboard table, its columns and settings;
- :mod:`~zoorank.decide.decision`: the top set and the flags (the decision settings);
- :mod:`~zoorank.decide.rank_intervals`: the rank intervals, p(best) and top set of each resampled
  metric and of the leaderboard's order;
- :mod:`~zoorank.decide.concordance`: the consensus of the label-free metrics, the width confound;
- :mod:`~zoorank.decide.oracle_top_sets`: the oracle's own top sets under fold resampling;
- :mod:`~zoorank.decide.board_priors`: the priors on a board, and their confound warnings;
- :mod:`~zoorank.decide.verdict`: ``decision.json``, the verdict (pick, shortlist, expected
  regret, disagreement, next step, caveats), and :mod:`~zoorank.decide.shortlist`,
  :mod:`~zoorank.decide.next_step`, :mod:`~zoorank.decide.metric_record`, what it is built from.
"""
