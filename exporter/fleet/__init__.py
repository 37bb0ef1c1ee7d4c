"""Many models in one run: a fleet of checkpoints checked by the one pipeline (``pipeline.run_check``).

``spec`` reads the fleet (checkpoints on the command line, or a fleet TOML file) and the shards;
``plan`` turns each model into its ``RunConfig`` before any work starts (bad input fails first);
``worker`` checks one model and returns a ``ModelResult`` (JSON-ready, picklable);
``local`` runs the models over a standard-library process pool, ``ray_executor`` over a Ray cluster;
``result`` holds the typed fleet report and ``merge`` joins the JSON reports of several runs (shards)
into one. The views of a fleet report are ``exporter/report/fleet.py``.
"""
