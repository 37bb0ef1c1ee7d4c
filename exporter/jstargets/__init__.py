"""The targets without Python (``export-check replay BUNDLE --target node|browser``): the bundle's onnxruntime rows run
in onnxruntime-node under Node, or in onnxruntime-web (WebAssembly) in headless Chromium, fed the bundle's golden
inputs; the outputs come back to the replay, which judges them with the same gates and views as any target.

``target`` (what runs where, the runner), ``bridge`` (the local HTTP server both JavaScript sides talk to), ``npm``
(the pinned packages, installed once into the cache); the JavaScript itself is package data beside them:
``serve.mjs`` (the loop), ``node.mjs``, ``page.html`` and ``page.mjs``, ``package.json`` and ``package-lock.json``.
"""
