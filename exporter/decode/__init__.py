"""Language models (issue 45): a generative golden set, the decode step with its KV cache in the forms
people ship, each file stepped token by token in its runtime, and verdicts on the tokens it generates.

Nothing is imported here: the check imports ``decode.run.run_generation`` when its golden set is generative (it
imports torch), and the options and the config read ``decode.names`` and ``decode.goldenset`` alone.
"""
