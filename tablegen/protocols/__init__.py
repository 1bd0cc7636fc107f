"""Multi-message shuffled protocols of arXiv:1911.06879, section 3: the binary-sum and
histogram protocols as runnable code (``simulate``) and their exact accounting (``accounting``)."""
