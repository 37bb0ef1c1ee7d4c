"""The run in the order it happens: pipeline (the order), observe (builds, reloads and replays: numbers only), judge
(pure: records and gates -> rows and reasons), explain (what only a flagged row needs), and judge again. What the stages
hand each other (records.py) and every sentence a row says (sentences.py) are on the ground floor beside them: every
folder reads them, so inside run/ they would tie each folder to run/ in a loop."""
