"""Reports of saved results: terminal tables, figures, HTML and Markdown.

The only output stage: every table, headline and figure effdepth shows or
writes is rendered here, from results and plain rows; nothing here imports a
workflow (measure, sweep, trajectory, intervene, experiment, ...).

- :mod:`.numbers`: how numbers are written (``fmt``, ``fmt_interval``, ``format_params``).
- :mod:`.wording`: the sentences every output shares (the attribution's sign
  convention, similarity names, the carry of an intervened model, the paper's abstract).
- :mod:`.rows`: what tables of every format are made of (views per similarity,
  unavailable values and their reasons, what tells results apart).
- :mod:`.tables`: plain-text tables (``effdepth show``, ``effdepth claims``, the
  ``measure``, ``sweep``, ``trajectory``, ``intervene`` and ``experiment`` output).
- :mod:`.style`: the one figure style (palette, rc parameters, canvases, writing PNG + PDF).
- :mod:`.figures`: the standard figures of a result; :mod:`.figures_suite`,
  :mod:`.figures_trajectory`, :mod:`.figures_intervention` and
  :mod:`.figures_experiment`: the figures of the other kinds of results.
- :mod:`.build`: ``effdepth report``: one self-contained HTML file, or
  Markdown with its images beside it, for one result or a comparison.

Nothing heavy is imported here, so ``effdepth show`` stays fast.
"""
