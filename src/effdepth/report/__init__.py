"""Reports of saved results: terminal tables, figures, HTML and Markdown.

The only output stage: every table, headline and figure effdepth shows or writes is rendered here, from
results and plain rows (:mod:`.content`, which the writers :mod:`.plain`, :mod:`.html` and :mod:`.markdown`
render alike); nothing here imports a workflow, and nothing heavy is imported here, so ``effdepth show``
stays fast.
"""
