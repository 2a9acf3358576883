"""Reports of saved results: terminal tables, figures, HTML and Markdown.

The only output stage: every table, headline and figure effdepth shows or
writes is rendered here, from results and plain rows; nothing here imports a
workflow (measure, sweep, trajectory, intervene, experiment, ...).

- :mod:`.numbers`: how numbers are written (``fmt``, ``fmt_interval``, ``format_params``).
- :mod:`.wording`: the sentences every output shares (the attribution's sign
  convention, similarity names, the carry of an intervened model, the paper's abstract).
- :mod:`.rows`: what tables of every format are made of (views per similarity,
  unavailable values and their reasons, what tells results apart).
- :mod:`.content`: what a report says, the one content model (a result of either
  mode as headline lines, summary rows and sections of tables) (each saved study's
  tables and figure live in its own folder).
- :mod:`.plain`, :mod:`.html`, :mod:`.markdown`: the three writers of that content;
  :mod:`.tables`: what ``effdepth measure``, ``effdepth show`` and ``effdepth claims`` print.
- :mod:`.style`: the one figure style (palette, rc parameters, canvases, writing PNG + PDF).
- :mod:`.figures`: the standard figures of a result (with :mod:`.figures_common`,
  :mod:`.figures_layers`, :mod:`.figures_ratios`, :mod:`.figures_confounds`).
- :mod:`.build`: ``effdepth report``: one self-contained HTML file, or
  Markdown with its images beside it, for one result or a comparison, and the studies beside them.

Nothing heavy is imported here, so ``effdepth show`` stays fast.
"""
