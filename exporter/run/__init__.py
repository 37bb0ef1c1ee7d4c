"""The run in the order it happens: pipeline (the order), observe (builds, reloads and replays: numbers
only), records (what was observed), judge (pure: records and gates -> rows and reasons), explain (what only a
flagged row needs), judge again, and sentences (every message a row or a run says)."""
