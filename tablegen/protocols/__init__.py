"""Multi-message shuffled protocols of shuffled-histograms.txt (section 3): the binary-sum and
histogram protocols as runnable code (``simulate``) and their exact accounting (``accounting``)."""
