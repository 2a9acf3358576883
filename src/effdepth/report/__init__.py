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
  mode as headline lines, summary rows and sections of tables); :mod:`.studies`: the
  saved studies' sections (null, pruning, intervention, carry experiment, trajectory)
  and the summaries of sweeps.
- :mod:`.plain`, :mod:`.html`, :mod:`.markdown`: the three writers of that content;
  :mod:`.tables`: what each command prints (``effdepth show``, ``effdepth claims``,
  the ``measure``, ``sweep``, ``trajectory``, ``intervene`` and ``experiment`` output).
- :mod:`.style`: the one figure style (palette, rc parameters, canvases, writing PNG + PDF).
- :mod:`.figures`: the standard figures of a result (with :mod:`.figures_common`,
  :mod:`.figures_layers`, :mod:`.figures_ratios`); :mod:`.figures_suite`,
  :mod:`.figures_trajectory`, :mod:`.figures_intervention`, :mod:`.figures_experiment`,
  :mod:`.figures_null` and :mod:`.figures_prune`: the figures of the other kinds of results.
- :mod:`.build`: ``effdepth report``: one self-contained HTML file, or
  Markdown with its images beside it, for one result or a comparison.

Nothing heavy is imported here, so ``effdepth show`` stays fast.
"""
