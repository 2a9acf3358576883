"""Reports of saved results: terminal tables, figures, HTML and Markdown.

- :mod:`.table`: plain-text tables (``effdepth show``, the ``measure`` output).
- :mod:`.figures`: matplotlib figures (PNG + PDF), headless.
- :mod:`.build`: ``effdepth report``: one self-contained HTML file, or
  Markdown with its images beside it, for one result or a comparison.

Nothing heavy is imported here, so ``effdepth show`` stays fast.
"""
