"""The benchmarks, one tool with sections: ``python -m bench --list``, ``python -m bench SECTION [--quick]``.

Each section (``bench/*_bench.py``) has ``main(argv=None)``: it runs its parts, prints their Markdown
and replaces its own blocks of bench/RESULTS.md (bench/common.py); bench/README.md lists them.
"""
