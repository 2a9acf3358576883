"""Reports of saved results: terminal tables, figures, HTML and Markdown.

The only output stage; nothing heavy is imported here, so ``effdepth show`` stays fast.
"""
